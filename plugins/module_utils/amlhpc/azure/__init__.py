# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""AzureML as plain data, standard library only: nodes as inventory hosts, credentials by
auth_source, the job request and its runs, the local backend. Runs on the controller."""
