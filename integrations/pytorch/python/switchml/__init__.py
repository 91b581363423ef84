"""SwitchML: in-network aggregation for distributed training.

``import switchml.torch`` registers the ``"switchml"`` backend of ``torch.distributed``
(PyTorch 2.x); see that module for its settings.
"""

__all__ = ["__version__"]

__version__ = "0.3.0"
