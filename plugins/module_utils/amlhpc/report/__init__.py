# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The run's report, standard library only: the short text summary, the HTML page with its
SVG plots, and the page's file on the controller."""
