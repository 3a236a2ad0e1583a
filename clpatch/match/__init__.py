"""Layer 2: the Matches contract and the search engines that produce it (the windowed
search, the VBM3D video search), behind the matcher protocol of `matcher.py`."""
