"""The step-time model lives in the core (``paralleljob.core.steptime``) since elastic growth prices an added
replica with it in the operator as well as here; the simulator's modules keep importing it from this name."""

from paralleljob.core.steptime import STEP_MODELS, StepTimeModel

__all__ = ["STEP_MODELS", "StepTimeModel"]
