"""`clpatch demo`: add seeded noise to the bundled sample image, denoise it with NL-means'
defaults and show the PSNR and the time."""

from __future__ import annotations

import argparse

from ..core.resources import sample_image_path
from ..io.images import add_noise, read_image
from .common import add_device_option
from .denoise import denoise_image
from .outputs import check_format, check_outputs

DEMO_SIGMA = 20.0
DEMO_SEED = 0


def cmd_demo(args: argparse.Namespace) -> int:
    """`clpatch demo`: denoise the bundled sample image after adding seeded noise."""
    path = sample_image_path()
    check_outputs([args.output], inputs=[str(path)], overwrite=args.overwrite)
    clean, info = read_image(path)
    check_format(args.output, info)
    noisy = add_noise(clean, DEMO_SIGMA, DEMO_SEED)
    args.method, args.sigma = "nlmeans", DEMO_SIGMA
    return denoise_image(f"{path.name} (bundled sample)", noisy, info, args, clean=clean,
                         clean_name=path.name,
                         noise_line=f"added Gaussian noise, sigma {DEMO_SIGMA:g}, seed "
                         f"{DEMO_SEED} (not clipped)")


def add_command(commands: argparse._SubParsersAction) -> None:
    """Add `demo` to the command line's sub-commands."""
    demo = commands.add_parser("demo", help="denoise the bundled sample image and show the PSNR",
                               description=f"Add Gaussian noise (sigma {DEMO_SIGMA:g}, seed "
                               f"{DEMO_SEED}) to the bundled 512x512 sample image, denoise it with "
                               "NL-means' defaults and print the PSNR before and after and the "
                               "time. Writes nothing unless --output is given.")
    add_device_option(demo)
    demo.add_argument("--output", "-o", metavar="FILE", default=None,
                      help="write the denoised image to FILE (.png, .tif, .jpg, .webp, .bmp, .npy)")
    demo.add_argument("--overwrite", action="store_true",
                      help="replace FILE when it already exists")
    demo.set_defaults(func=cmd_demo)
