"""What an artifact records about a model's training (its metadata JSON): kept apart so the model
classes (neural.py) and the training code (training.py) both use it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class TrainingInfo:
    """What the artifact records about training (metadata JSON)."""

    trained_hours: tuple[int, int] = (0, 0)
    trained_range: tuple[str, str] = ("", "")
    validation: dict[str, float] = field(default_factory=dict)
    fits: int = 0
    seed: int = 0
