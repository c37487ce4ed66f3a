# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The first play's checks, standard library only: every role variable against its
argument spec and the rules between them, every variable name against all the specs (a
typo named, with the name meant), the inventory's sanity, and Azure resource ids against
Azure's grammar before any call."""
