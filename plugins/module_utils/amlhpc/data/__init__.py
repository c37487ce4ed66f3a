# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""The CosmoFlow data set, standard library only: TFRecord reading, the small generator and
the preparation (gzip, upload) of a data set for staging."""
