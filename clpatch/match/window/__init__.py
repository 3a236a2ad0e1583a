"""The exact windowed search (Davy–Ehret §4.1) and VBM3D's predictive video search (§4.2):
`search_patches` (search.py), its plan (plan.py), configurations and the scheduler's rules
(config.py), request checks (params.py), chunks and launches (layout.py, launch.py),
`explain` (explain.py), the video search (video.py)."""
