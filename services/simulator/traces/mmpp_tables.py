"""Published statistics the MMPP generator samples from (data only, no logic).

Transcribed from shared/data/gfs-v2026/stats (MIT-licensed tables derived from Alibaba
cluster-trace-v2026-spot-gpu; notice in that folder's README.md). File names and CALIBRATION.md
sections are given per table; "[D]" marks a value this module derived, with how. The constants
live here rather than being read from that folder so the generator runs on a machine without it.
"""

from __future__ import annotations

# ----- sizes ------------------------------------------------------------------------------------
# worker_num -> jobs, the whole trace (outputs/tables/worker_count_distribution.csv, all 207 rows).
WORKER_COUNTS: tuple[tuple[int, int], ...] = (
    (1, 427584), (2, 13142), (3, 4600), (4, 5267), (5, 1689), (6, 1785), (7, 1566), (8, 2486),
    (9, 632), (10, 555), (11, 482), (12, 467), (13, 369), (14, 291), (15, 535), (16, 872), (17, 200),
    (18, 163), (19, 155), (20, 125), (21, 136), (22, 113), (23, 130), (24, 153), (25, 167), (26, 52),
    (27, 75), (28, 87), (29, 146), (30, 209), (31, 300), (32, 755), (33, 27), (34, 21), (35, 24),
    (36, 20), (37, 19), (38, 20), (39, 47), (40, 29), (41, 20), (42, 23), (43, 34), (44, 29), (45, 25),
    (46, 15), (47, 22), (48, 22), (49, 13), (50, 10), (51, 13), (52, 11), (53, 14), (54, 16), (55, 17),
    (56, 13), (57, 15), (58, 13), (59, 22), (60, 99), (61, 64), (62, 88), (63, 77), (64, 84), (65, 10),
    (66, 13), (67, 14), (68, 6), (69, 10), (70, 8), (71, 6), (72, 19), (73, 13), (74, 36), (75, 32),
    (76, 13), (77, 5), (78, 6), (79, 6), (80, 10), (81, 6), (82, 12), (83, 18), (84, 6), (85, 2),
    (86, 4), (87, 6), (88, 5), (89, 8), (90, 4), (91, 2), (92, 6), (93, 3), (94, 3), (95, 4), (96, 4),
    (97, 4), (98, 2), (99, 7), (100, 6), (101, 3), (103, 4), (104, 3), (105, 2), (106, 3), (107, 2),
    (108, 6), (109, 2), (110, 1), (111, 3), (112, 2), (113, 2), (114, 3), (115, 3), (116, 1),
    (117, 1), (118, 4), (119, 4), (120, 1), (121, 4), (122, 1), (123, 6), (124, 7), (125, 19),
    (126, 22), (127, 23), (128, 15), (129, 5), (130, 1), (132, 5), (133, 3), (135, 2), (137, 3),
    (138, 2), (139, 1), (140, 1), (142, 1), (143, 2), (144, 2), (147, 1), (148, 2), (149, 1),
    (150, 1), (153, 1), (154, 1), (155, 2), (156, 3), (157, 2), (158, 2), (159, 2), (160, 1),
    (161, 2), (162, 2), (164, 2), (166, 3), (168, 2), (169, 1), (170, 1), (171, 1), (172, 2),
    (174, 4), (175, 4), (176, 7), (177, 2), (178, 3), (179, 2), (182, 2), (183, 3), (184, 1),
    (185, 3), (189, 1), (190, 1), (191, 3), (196, 4), (198, 1), (200, 3), (201, 1), (202, 1),
    (203, 1), (207, 2), (209, 1), (215, 1), (217, 1), (219, 1), (222, 2), (223, 1), (224, 2),
    (228, 1), (233, 2), (238, 3), (240, 3), (241, 1), (244, 1), (246, 2), (247, 1), (248, 1),
    (249, 1), (253, 1), (254, 1), (259, 1), (260, 1), (268, 1), (271, 1), (280, 1), (281, 1),
    (290, 1), (332, 1),
)  # fmt: skip
# Per type: share of multi-worker jobs and the largest gang (CALIBRATION.md 4.1).
MULTI_SHARE = {"HP": 0.0557, "SPOT": 0.3153}
MAX_WORKERS = {"HP": 182, "SPOT": 332}

# gpu_request value -> jobs, per type (CALIBRATION.md 3, from the quick notebook's value counts).
GPU_VALUES: tuple[float, ...] = (
    0.01, 0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.67, 0.8, 0.85, 1, 2, 3, 4, 5, 6, 7, 8,
)  # fmt: skip
GPU_COUNTS: dict[str, tuple[int, ...]] = {
    "HP": (2, 2428, 8354, 1, 11996, 74, 25359, 6, 2, 3, 279827, 19589, 38, 12211, 45, 221, 24, 55533),
    "SPOT": (0, 0, 0, 0, 0, 0, 1013, 0, 0, 0, 35095, 3396, 8, 5812, 11, 9, 0, 5810),
}
# Median gpu_request per model (outputs/tables/demand_by_model.csv, median_gpu_req).
MEDIAN_GPU_REQUEST: dict[str, float] = {
    "A10": 1.0,
    "A100-SXM4-80GB": 1.0,
    "A800-SXM4-80GB": 2.0,
    "GPU-series-1": 1.0,
    "GPU-series-2": 4.0,
    "H800": 8.0,
}

# cpu_request / gpu_request buckets and their job shares (outputs_extra/tables/bucket_cpu_per_gpu.csv).
CPU_PER_GPU_EDGES: tuple[float, ...] = (0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256)
CPU_PER_GPU_SHARES: tuple[float, ...] = (
    0.00717, 0.00075, 0.11928, 0.11800, 0.62200, 0.09020, 0.03373, 0.00704, 0.00184,
)  # fmt: skip

# ----- durations ----------------------------------------------------------------------------------
# Quantile knots (probability, seconds) of the duration per type. Between knots log(duration) is
# linear in the probability. Sources: p25/p50/p75/p90 per type (job_type_summary.csv and the quick
# notebook, CALIBRATION.md 6.1); P(>= 6 h) per type (long_job_slices_by_type.csv); for HP above p90
# the whole-trace knots (bucket_duration.csv: P(< 24 h) 92.06 %, P(< 3 d) 94.00 %;
# duration_quantiles.csv: p95 461,465 s) since HP is 97.6 % of the GPU-seconds; the largest values
# are the type maxima (HP: the 184-day clip; Spot 5,848,226 s). [D] The HP p99 knot (6.4 M s; the
# whole-trace p99 is 5.66 M s) and the Spot knots at p97 / p99.5 / p99.95 are solved so each
# type's mean holds (HP 206,521 s, Spot 13,680 s): no Spot quantile above p90 is published.
DURATION_KNOTS: dict[str, tuple[tuple[float, float], ...]] = {
    "HP": (
        (0.0, 1.0), (0.25, 205.0), (0.5, 1101.0), (0.75, 4009.0), (0.855, 21600.0), (0.9, 58770.0),
        (0.9206, 86400.0), (0.94, 259200.0), (0.95, 461465.0), (0.99, 6.4e6), (1.0, 15897599.0),
    ),
    "SPOT": (
        (0.0, 1.0), (0.25, 543.0), (0.5, 2095.5), (0.75, 8630.0), (0.9, 21740.0), (0.97, 64800.0),
        (0.995, 259200.0), (0.9995, 1.0e6), (1.0, 5848226.0),
    ),
}  # fmt: skip
# Median and mean duration in hours per (type, model) (quick notebook, CALIBRATION.md 6.3): the
# type's quantile curve is shifted in log space so its median lands on the first, and its upper
# half (above the median) is stretched or shrunk in log space so its mean lands on the second.
MEDIAN_DURATION_H: dict[str, dict[str, float]] = {
    "HP": {
        "A10": 0.11, "A100-SXM4-80GB": 0.52, "A800-SXM4-80GB": 0.39, "GPU-series-1": 1.10,
        "GPU-series-2": 0.37, "H800": 0.26,
    },
    "SPOT": {
        "A10": 1.33, "A100-SXM4-80GB": 0.48, "A800-SXM4-80GB": 0.39, "GPU-series-1": 2.61,
        "GPU-series-2": 1.42, "H800": 0.32,
    },
}  # fmt: skip

MEAN_DURATION_H: dict[str, dict[str, float]] = {
    "HP": {
        "A10": 66.21, "A100-SXM4-80GB": 25.32, "A800-SXM4-80GB": 12.14, "GPU-series-1": 315.42,
        "GPU-series-2": 8.07, "H800": 5.46,
    },
    "SPOT": {
        "A10": 13.21, "A100-SXM4-80GB": 3.44, "A800-SXM4-80GB": 1.73, "GPU-series-1": 3.87,
        "GPU-series-2": 3.42, "H800": 6.05,
    },
}  # fmt: skip

# Spot jobs per model (CALIBRATION.md 1.2, Spot column) and the published fleet's GPUs per model
# (fleet_by_model.csv): with the Spot mean durations above they give each model's share of the
# Spot GPU-time per GPU it has [D: jobs x mean duration / GPUs; per-model Spot GPU-seconds are not
# published], which spreads a cluster-wide spot load over the pools as the trace does.
SPOT_JOBS: dict[str, int] = {
    "A10": 1762, "A100-SXM4-80GB": 31624, "A800-SXM4-80GB": 4109, "GPU-series-1": 2857,
    "GPU-series-2": 8057, "H800": 2745,
}  # fmt: skip
FLEET_GPUS: dict[str, int] = {
    "A10": 2494, "A100-SXM4-80GB": 3456, "A800-SXM4-80GB": 176, "GPU-series-1": 1558,
    "GPU-series-2": 976, "H800": 1752,
}  # fmt: skip

# ----- arrival profile ----------------------------------------------------------------------------
# Hour-of-day index (trace hour 0 ~ local midnight), corrected for the t = 0 population
# (hour_of_day_patterns.csv / hourly_summary.csv, CALIBRATION.md 2.3).
HOUR_INDEX: tuple[float, ...] = (
    0.97, 0.83, 0.73, 0.69, 0.67, 0.73, 0.74, 0.78, 0.83, 0.88, 1.30, 1.33,
    1.02, 1.00, 1.31, 1.30, 1.40, 1.32, 1.04, 1.10, 1.13, 0.99, 0.98, 0.94,
)  # fmt: skip
# Day-of-week factor per day mod 7, per type (daily_summary.csv, CALIBRATION.md 2.2).
WEEKDAY: dict[str, tuple[float, ...]] = {
    "HP": (0.90, 0.78, 0.73, 1.08, 1.12, 1.10, 1.04),
    "SPOT": (0.89, 0.64, 0.73, 1.29, 1.12, 1.16, 0.95),
}
