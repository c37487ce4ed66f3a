# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The first play's checks, standard library only: every role variable against its
argument spec and the rules between them, and the inventory's sanity."""
