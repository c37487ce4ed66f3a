# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""A node lost during training, standard library only: the sentence that names it, the
last look before submit and what the next run does about it."""
