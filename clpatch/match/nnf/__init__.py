"""Nearest-neighbour fields by propagation-assisted k-d trees (Oancea et al.): `nnf` and
`reconstruct` (search.py), the plan (plan.py), the PCA model (pca.py), the k-d tree build
(tree.py), bands of a for inputs beyond the device (bands.py), `explain` (explain.py)."""
