# Copyright: (c) 2026, amlhpc contributors
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""After a node lost during training: stop and name the command, or resume by itself (issue 48 item 4).

``submit_on_node_loss: stop`` (the default) ends the run with one sentence naming the lost node
and the command that resumes. ``resume`` makes the same ``ansible-playbook`` run carry on: the
submit role records the interruption and, where :func:`decide` says ``resume``, sets
``node_loss_resume_round`` on the controller; ``playbooks/site.yml`` imports ``playbooks/resume.yml``
:data:`ROUNDS` times, and only the round whose number it is runs (its plays match no host
otherwise): it reads the inventory again, looks at every listed node, sets the nodes up, gates
them, maps them onto the run's shard slots, stages, takes the last look and submits again, which
resumes from the last durable checkpoint.

:func:`decide` is the whole decision, from plain data. It never resumes more than
``submit_resume_attempts`` times in one run (nor more than :data:`ROUNDS`, the rounds the playbook
holds), never in check mode, never where no checkpoint is durable (the new attempt would start from
epoch 1 and lose every epoch trained), and never where fewer nodes are left than the run may train
on (its planned nodes less the ones ``healthcheck_spare_nodes`` lets it train without). Standard
library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ROUNDS = 3
"""The imports of playbooks/resume.yml in playbooks/site.yml: the hard bound on rounds in one run
(plays cannot loop); ``submit_resume_attempts`` may only lower it."""
MODES = ("stop", "resume")


@dataclass(frozen=True)
class Situation:
    """What the run knows when its job lost a node.

    ``mode``: ``submit_on_node_loss``; ``attempts``: ``submit_resume_attempts``; ``rounds_done``:
    the automatic rounds this ``ansible-playbook`` run already ran (``node_loss_resume_round``, 0 in
    its first pass); ``durable``: a resumed job has a checkpoint to resume from (a checkpoint store,
    or the local backend's own folder); ``planned``: the run's planned nodes (its shard slots, lost
    ones included); ``left``: the nodes that trained and are not lost; ``on_failure`` and
    ``spares``: the health gate's rule (``healthcheck_on_failure``, ``healthcheck_spare_nodes``),
    which says how many planned nodes the run may train without."""

    mode: str = "stop"
    attempts: int = 2
    rounds_done: int = 0
    check_mode: bool = False
    durable: bool = True
    planned: int = 1
    left: int = 0
    on_failure: str = "stop"
    spares: int = 0

    @property
    def bound(self) -> int:
        """How many automatic rounds this run may take."""
        return min(max(0, int(self.attempts)), ROUNDS)

    @property
    def needed(self) -> int:
        """The fewest nodes the run may train on."""
        spares = max(0, int(self.spares)) if self.on_failure == "exclude" else 0
        return max(1, int(self.planned) - spares)


def stop_sentence(record: Mapping[str, Any]) -> str:
    """The sentence of a run that stops after a node loss (``record``: the interruption, with the
    job's ``sentence``), naming the node and the command that resumes."""
    return (f"run {record.get('run_id') or record.get('run')} lost node {record.get('node')} in epoch "
            f"{record.get('epoch_reached')}: {record.get('sentence')}. Rerunning site.yml (or --tags "
            "healthcheck,stage,submit) gates the nodes again, leaves it out or gives its shard to the node AmlCompute "
            "put in its place (only its files move), and resumes from the last durable checkpoint")


def decide(record: Mapping[str, Any], situation: Situation) -> dict[str, Any]:
    """Resume by itself or stop, after the job lost the node ``record`` names.

    Returns ``action`` (``resume`` or ``stop``), ``round`` (the round that runs next; where the
    run stops, the rounds it ran), ``bound`` and ``message``: with ``resume`` one line saying which
    round of how many starts, otherwise the stop sentence (:func:`stop_sentence`), with why the run
    did not resume by itself where ``resume`` was asked for."""
    s = situation
    out = {"action": "stop", "round": int(s.rounds_done), "bound": s.bound, "message": stop_sentence(record)}
    if s.mode != "resume" or s.check_mode:
        return out
    if s.rounds_done >= s.bound:
        out["message"] += (f"; this run stopped after {int(s.rounds_done)} automatic attempt"
                           f"{'' if int(s.rounds_done) == 1 else 's'} (submit_resume_attempts: {int(s.attempts)})")
        return out
    if not s.durable:
        out["message"] += ("; not resumed by itself: no checkpoint is durable (submit_checkpoint_store is empty, so a "
                           "new attempt would start from epoch 1): set submit_checkpoint_store")
        return out
    if s.left < s.needed:
        out["message"] += (f"; not resumed by itself: {max(0, int(s.left))} of the run's {int(s.planned)} node(s) are "
                           f"left and it trains on no fewer than {s.needed} (healthcheck_on_failure: {s.on_failure}, "
                           f"healthcheck_spare_nodes: {int(s.spares)}): let AmlCompute replace the node, or set "
                           "healthcheck_on_failure: exclude with more healthcheck_spare_nodes")
        return out
    nxt = int(s.rounds_done) + 1
    out.update(action="resume", round=nxt, message=(
        f"run {record.get('run_id') or record.get('run')} lost node {record.get('node')} in epoch "
        f"{record.get('epoch_reached')}: {record.get('sentence')}. Resuming by itself (submit_on_node_loss: resume), "
        f"attempt {nxt} of at most {s.bound}: the inventory is read again, the nodes are looked at, gated and mapped "
        "onto the run's shard slots (only the lost node's files move), and the job resumes from the last durable "
        "checkpoint"))
    return out
