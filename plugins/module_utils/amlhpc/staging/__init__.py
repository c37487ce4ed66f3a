# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Data staging with azcopy, standard library only: the shard plan (controller), the stage
of one shard, its lock, progress and watch (node), SAS handling and the Blob REST listing."""
