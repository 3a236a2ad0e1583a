"""The tiled 2-means clustering ANN (Tsai et al.): `ann_search` and the filters' matcher
(search.py), its plan (plan.py), request and parameter rules (params.py), tile layout
(layout.py), the two-tiling pair the filters use (pair.py)."""
