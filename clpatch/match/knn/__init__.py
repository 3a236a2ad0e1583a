"""The exhaustive two-image kNN for any distance (Tang et al.): `knn` and `knn_vectors`
(search.py), its plan (plan.py), engine configurations and rules (config.py), the GEMM
engine (gemm.py), reference bands for inputs beyond the device (bands.py), `explain`
(explain.py)."""
