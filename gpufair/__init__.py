"""gpufair: a fair, data-aware control plane for shared GPU training clusters."""
__version__ = "0.1.0"
