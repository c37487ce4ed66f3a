# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The health gate, standard library only: the node checks and their parsers, the probe that
runs on a node, the pair gate's rounds and the verdict on the nodes it fails."""
