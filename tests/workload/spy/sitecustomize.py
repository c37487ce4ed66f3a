"""Records which data files a training process and its DataLoader workers open.

Put this folder on PYTHONPATH and name a log in COSMOFLOW_READ_LOG: every process started with
that environment (a rank, and its workers whatever their start method) appends one line per
``*.tfrecord*`` file it opens: ``<RANK> <worker id or -> <split> <file name>``. It observes through
Python's audit hooks (``sys.addaudithook``): nothing of the training code is replaced.
"""

import os
import sys

_LOG = os.environ.get("COSMOFLOW_READ_LOG")
_FD = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if _LOG else -1


def _hook(event, args):
    if event != "open" or not args or not isinstance(args[0], str) or ".tfrecord" not in args[0]:
        return
    path = args[0]
    loader = sys.modules.get("torch.utils.data")
    info = loader.get_worker_info() if loader is not None else None
    worker = "-" if info is None else str(info.id)
    split = os.path.basename(os.path.dirname(path))
    line = f"{os.environ.get('RANK', '0')} {worker} {split} {os.path.basename(path)}\n"
    os.write(_FD, line.encode())


if _FD >= 0:
    sys.addaudithook(_hook)
