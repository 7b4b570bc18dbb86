"""Job 2 of the device-cost benchmark: the bytes of a reply carrying one report, as a SuperNode pushes it."""

from __future__ import annotations

from typing import Any


def measure_bytes(reply: Any) -> dict[str, Any]:
    """Sizes of a release reply carrying one report, as a Flower 1.41 SuperNode pushes it."""
    from flwr.app.message.message import remove_content_from_message
    from flwr.common.serde import message_to_proto
    from flwr.proto.fleet_pb2 import PushMessagesRequest  # pylint: disable=no-name-in-module
    from flwr.proto.message_pb2 import PushObjectRequest  # pylint: disable=no-name-in-module
    from flwr.proto.node_pb2 import Node  # pylint: disable=no-name-in-module
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects, get_object_tree

    record = reply.content.array_records["reports"]
    arrays = {}
    for name, array in record.items():
        values = array.numpy()
        arrays[name] = {"dtype": str(values.dtype), "shape": list(values.shape), "raw_bytes": int(values.nbytes)}
    objects = get_all_nested_objects(reply)
    kinds: dict[str, dict[str, int]] = {}
    for obj in objects.values():
        entry = kinds.setdefault(type(obj).__name__, {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += len(obj.deflate())
    node = Node(node_id=2**63 - 1)
    session = "0" * 36
    push_messages = PushMessagesRequest(
        node=node, messages_list=[message_to_proto(remove_content_from_message(reply))],
        message_object_trees=[get_object_tree(reply)], clientapp_runtime_list=[0.5],
    ).ByteSize()
    push_objects = [
        PushObjectRequest(node=node, run_id=2**63 - 1, object_id=object_id, object_content=obj.deflate(), session_id=session).ByteSize()
        for object_id, obj in objects.items()
    ]
    report = record["reports"].numpy()
    return {
        "reports_per_message": int(len(report)),
        "report_raw_bytes": int(report[0].nbytes) if len(report) else 0,
        "arrays": arrays,
        "arrays_raw_bytes": int(sum(a["raw_bytes"] for a in arrays.values())),
        "flower_objects": kinds,
        "flower_objects_bytes": int(sum(k["bytes"] for k in kinds.values())),
        "protobuf_push_messages_bytes": int(push_messages),
        "protobuf_push_object_bytes": int(sum(push_objects)),
        "protobuf_total_bytes": int(push_messages + sum(push_objects)),
        "http_requests": 1 + len(push_objects),
        "meta_json_bytes": int(sum(len(str(v)) for v in reply.content.config_records["meta"].values())),
    }
