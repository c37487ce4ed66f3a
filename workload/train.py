"""Entry point for AzureML (ScriptRunConfig script within source_directory) and torchrun/mpirun.

    torchrun --nproc_per_node 2 workload/train.py --data-dir DATA ...
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The shared code (package amlhpc) sits next to this file in a job's snapshot (aml_job copies
# it there); in the repository or the installed collection it is plugins/module_utils/amlhpc.
if not os.path.isdir(os.path.join(HERE, "amlhpc")):
    sys.path.insert(1, os.path.join(os.path.dirname(HERE), "plugins", "module_utils"))

from cosmoflow.train import main  # noqa: E402

if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as exc:
        if isinstance(exc.code, str):  # its one sentence, on one line the submit role finds (job_runs.refusal)
            print(f"[cosmoflow] stopped: {' '.join(exc.code.split())}", file=sys.stderr, flush=True)
            sys.exit(1)
        raise
