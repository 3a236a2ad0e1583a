"""Image and video files for the command line, also usable from Python.

`images` reads and writes single images (PNG, TIFF, JPEG, `.npy`, ...), keeping their bit
depth and alpha channel; `video` reads and writes frame sequences (frame directories,
multi-page TIFF, `.npy` arrays and, with the `video` extra, video files). The other modules
are their parts: `png`, `decode`, `noise`, `errors`, `video_info`, `video_readers` and
`video_writer`. Nothing is imported here.
"""
