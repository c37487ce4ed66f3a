# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""What is set up on a node, standard library only: BeeOND, NVMe RAID0, NCCL, GPU clocks,
and the one-command reads of a node that let a rerun skip a module run."""
