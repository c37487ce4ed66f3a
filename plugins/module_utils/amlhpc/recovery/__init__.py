# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""A node lost during training, standard library only: the sentence that names it (a slow
peer is not lost), a listed node that does not answer and where each head moves, the last
look before submit, what the next run does about it, and the run a checkpoint store belongs
to."""
