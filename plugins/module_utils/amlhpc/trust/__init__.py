# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""SSH trust, standard library only: host keys pinned to AmlCompute node ids on the
controller, whether the operator's ssh settings leave those pins in force, and the nodefile
and known_hosts entries the nodes get."""
