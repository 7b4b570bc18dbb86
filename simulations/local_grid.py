"""In-process Grid: runs ServerApp + ClientApp in one Python process, no Ray, no subprocesses.

For fast tests of app logic (ms per message) and for sweeps that run many small runs in one process. Mirrors Flower semantics we rely on:
per-node Context (state persists across messages), node_config partition-id/num-partitions,
exceptions in ClientApp -> error reply with code 2 (CLIENT_APP_RAISED_EXCEPTION).

With ``engine=True`` (the default) the grid plays the simulation engine: every ClientApp call
runs inside :func:`fed.device.entropy.simulation_engine`, so nodes seed noise from the run seed and
take their policy from the run options. With ``engine=False`` the nodes behave as devices
(their ``node_config`` names policy, state folder and data).
"""
from __future__ import annotations

import copy
import secrets
import traceback
import uuid
from contextlib import nullcontext
from collections.abc import Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from ldpfed.fed.device.entropy import simulation_engine


class LocalGrid(Grid):
    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: dict, run_id: int | None = None,
                 engine: bool = True, node_configs: list[dict] | None = None):
        self.client_app = client_app
        self.engine = engine
        run_id = secrets.randbits(62) if run_id is None else run_id
        self._run = Run.create_empty(run_id)
        self.node_ctx = {
            1000 + i: Context(run_id=run_id, node_id=1000 + i,
                              node_config={"partition-id": i, "num-partitions": num_nodes,
                                           **(node_configs[i] if node_configs else {})},
                              state=RecordDict(), run_config=dict(run_config))
            for i in range(num_nodes)
        }
        self._replies: dict[str, Message] = {}
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, 1

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ctx)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            mid = str(uuid.uuid4())
            msg.metadata.__dict__["_message_id"] = mid
            ctx = self.node_ctx[msg.metadata.dst_node_id]
            inbound = Message(copy.deepcopy(msg.content), dst_node_id=msg.metadata.dst_node_id,
                              message_type=msg.metadata.message_type)
            inbound.metadata.__dict__["_message_id"] = mid
            try:
                with simulation_engine() if self.engine else nullcontext():
                    reply = self.client_app(inbound, ctx)
            except Exception as ex:  # same shape as Flower: code 2 + "<class ...>:<'msg'>"
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                      reason=f"{type(ex)}:<'{ex}'>\n{traceback.format_exc()}"),
                                reply_to=inbound)
            self._replies[mid] = reply
            ids.append(mid)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(m) for m in message_ids if m in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None):
        return self.pull_messages(self.push_messages(messages))


def run_local(server_app: ServerApp, client_app: ClientApp, num_nodes: int, run_config: dict, **grid_options) -> LocalGrid:
    grid = LocalGrid(client_app, num_nodes, run_config, **grid_options)
    server_app(grid, Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config=dict(run_config)))
    return grid
