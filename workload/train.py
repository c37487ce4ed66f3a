"""Entry point for AzureML (ScriptRunConfig script within source_directory) and torchrun/mpirun.

    torchrun --nproc_per_node 2 workload/train.py --data-dir DATA ...
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cosmoflow.train import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
