"""Layer 3: the filters that consume Matches (NL-means, BM3D/CBM3D, VBM3D) and what they
share (the collaborative filter, aggregation, transforms)."""
