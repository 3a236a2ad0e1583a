"""Drop-in signatures of CPU denoising libraries, computed by clpatch.

Users switching from a CPU library change one import; the arguments, their scales and the
return dtypes are the original's, the computation is clpatch's:

- `clpatch.compat.skimage`: scikit-image's ``denoise_nl_means`` and ``estimate_sigma``
  (``from clpatch.compat.skimage import denoise_nl_means, estimate_sigma``);
- `clpatch.compat.bm3d`: the ``bm3d`` package's ``bm3d`` for white noise
  (``from clpatch.compat.bm3d import bm3d, BM3DStages``).

Each function's docstring says where its result differs from the original's. Values clpatch
cannot honour (a 3-D volume, a coloured-noise PSD, another BM3D profile, ...) raise an error
naming the argument. Nothing here is imported by ``import clpatch``, and these modules use
only clpatch's public names; scikit-image and bm3d are never imported (not needed).
"""
