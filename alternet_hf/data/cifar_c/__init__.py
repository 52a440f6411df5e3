"""CIFAR-C as released (Hendrycks & Dietterich, ICLR 2019): its 15 corruptions, 5 severities and the parameters of
each (`make_cifar_c.py` in hendrycks/robustness; docs/paper.md §6), where the arrays are, and how to cite it. Plain
data, with no import: the commands list the corruptions before torch is imported."""

ZENODO_URL = "https://zenodo.org/records/3555552"  # CIFAR-10-C and CIFAR-100-C, as released

SEVERITIES = (1, 2, 3, 4, 5)

# name -> parameters of severities 1..5: the CIFAR-C values (docs/paper.md §6, make_cifar_c.py).
SEVERITY_PARAMETERS: dict[str, tuple] = {
    "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),  # σ
    "shot_noise": (500, 250, 100, 75, 50),  # photons λ: Poisson(x·λ)/λ
    "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),  # salt-and-pepper amount
    "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),  # disk radius, alias σ
    "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),  # σ, δ, iterations
    "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),  # radius, σ
    "zoom_blur": (1.06, 1.11, 1.16, 1.21, 1.26),  # zooms np.arange(1, this, 0.01)
    "snow": (  # snow mean, std, zoom, threshold, blur radius, blur σ, image blend
        (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
        (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
        (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
        (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
    ),
    "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),  # image weight, frost weight
    "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),  # fog strength, wibble decay
    "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),  # added to HSV value
    "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),  # factor around the channel means
    "elastic_transform": tuple(  # displacement α, smoothing σ, affine corner shift: pixels of a 32-px image
        (32 * a, 32 * s, 32 * f)
        for a, s, f in ((0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06), (0.1, 0.04, 0.05), (0.1, 0.03, 0.03))
    ),
    "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),  # resolution factor
    "jpeg_compression": (80, 65, 58, 50, 40),  # quality
}
CORRUPTIONS = tuple(SEVERITY_PARAMETERS)

CIFAR_C_CITATION = """@inproceedings{hendrycks2019benchmarking,
  title={Benchmarking Neural Network Robustness to Common Corruptions and Perturbations},
  author={Dan Hendrycks and Thomas Dietterich},
  booktitle={International Conference on Learning Representations},
  year={2019}
}"""
