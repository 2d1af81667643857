"""Partition shapes, priority, deny/allow lists, minimum size and the report's reasons."""

from offload.ir import Block, DataType, Operation, TensorType, Value
from offload.partitioner import Partitioner, Reason, format_report

from .helpers import F32, FakeBackend, build, groups, placement

# Relu/Add/Mul are "supported", Neg/Sub are not.
SUP = {"Relu", "Add", "Mul"}


def fake():
    return FakeBackend("fake", SUP)


def test_chain_is_one_partition():
    p = build([("a", "Relu", ["x"]), ("b", "Relu", ["a"]), ("c", "Add", ["a", "b"])], ["c"])
    report = Partitioner([fake()]).partition(p)
    assert groups(report) == [{"a", "b", "c"}]
    assert report.summary()["delegated_percent"] == 100.0


def test_diamond_is_one_partition():
    nodes = [("a", "Relu", ["x"]), ("b", "Relu", ["a"]), ("c", "Mul", ["a", "a"]), ("d", "Add", ["b", "c"])]
    report = Partitioner([fake()]).partition(build(nodes, ["d"]))
    assert groups(report) == [{"a", "b", "c", "d"}]


def test_path_through_cpu_op_splits_partitions():
    # A(sup) -> B(unsup) -> C(sup), and A -> C: A and C together would form a cycle.
    nodes = [("A", "Relu", ["x"]), ("B", "Neg", ["A"]), ("C", "Add", ["A", "B"])]
    report = Partitioner([fake()]).partition(build(nodes, ["C"]))
    assert groups(report) == [{"A"}, {"C"}]
    assert placement(report, "B").reason is Reason.NO_BACKEND


def test_cycle_reason_when_the_refused_op_is_too_small():
    nodes = [("A", "Relu", ["x"]), ("A2", "Relu", ["A"]), ("B", "Neg", ["A2"]), ("C", "Add", ["A2", "B"])]
    report = Partitioner([fake()], min_ops=2).partition(build(nodes, ["C"]))
    assert groups(report) == [{"A", "A2"}]
    assert placement(report, "C").reason is Reason.CYCLE


def test_diamond_with_cpu_arm():
    nodes = [("a", "Relu", ["x"]), ("b", "Neg", ["a"]), ("c", "Relu", ["a"]), ("d", "Add", ["b", "c"])]
    report = Partitioner([fake()]).partition(build(nodes, ["d"]))
    assert groups(report) == [{"a", "c"}, {"d"}]


def test_alternating_chain():
    nodes = [
        ("a", "Relu", ["x"]),
        ("b", "Neg", ["a"]),
        ("c", "Relu", ["b"]),
        ("d", "Neg", ["c"]),
        ("e", "Relu", ["d"]),
    ]
    report = Partitioner([fake()]).partition(build(nodes, ["e"]))
    assert groups(report) == [{"a"}, {"c"}, {"e"}]
    s = report.summary()
    assert s["partitions"] == 3 and s["delegated_ops"] == 3 and s["ops"] == 5
    # x, a, b, c, d, e all cross a boundary; each float[2,3] is 24 bytes.
    assert s["boundary_tensors"] == 6 and s["boundary_bytes"] == 6 * 24


def test_independent_partitions_merge_across_cpu_ops():
    # Two supported branches joined by a supported op, with an unrelated CPU op in between.
    nodes = [("a", "Relu", ["x"]), ("n", "Neg", ["x"]), ("b", "Relu", ["x"]), ("c", "Add", ["a", "b"])]
    report = Partitioner([fake()]).partition(build(nodes, ["c", "n"]))
    assert groups(report) == [{"a", "b", "c"}]


def test_two_independent_partitions_of_one_backend_merge():
    nodes = [("a", "Relu", ["x"]), ("n", "Neg", ["a"]), ("b", "Relu", ["x"])]
    report = Partitioner([fake()]).partition(build(nodes, ["n", "b"]))
    assert groups(report) == [{"a", "b"}]


def test_priority_order_between_backends():
    first, second = FakeBackend("first", {"Relu"}), FakeBackend("second", {"Relu", "Add"})
    nodes = [("a", "Relu", ["x"]), ("b", "Add", ["a", "a"]), ("c", "Relu", ["b"])]
    report = Partitioner([first, second]).partition(build(nodes, ["c"]))
    assert [(part.backend.name, {op.name for op in part.ops}) for part in report.partitions] == [
        ("first", {"a"}),
        ("second", {"b"}),
        ("first", {"c"}),
    ]
    report = Partitioner([second, first]).partition(build(nodes, ["c"]))
    assert [part.backend.name for part in report.partitions] == ["second"]


def test_no_backend_reason_names_each_backend():
    p = build([("n", "Neg", ["x"])], ["n"])
    report = Partitioner([FakeBackend("one", {"Relu"}), FakeBackend("two", {"Add"})]).partition(p)
    pl = placement(report, "n")
    assert pl.reason is Reason.NO_BACKEND
    assert "one: one does not do Neg" in pl.detail and "two: two does not do Neg" in pl.detail


def test_deny_by_op_type_and_node_name_and_allow_list():
    nodes = [("a", "Relu", ["x"]), ("b", "Add", ["a", "a"]), ("c", "Mul", ["b", "b"])]
    p = build(nodes, ["c"])
    report = Partitioner([fake()], deny_ops=["Add"]).partition(p)
    assert placement(report, "b").reason is Reason.DENIED_OP
    assert groups(report) == [{"a"}, {"c"}]
    report = Partitioner([fake()], deny_nodes=["c"]).partition(p)
    assert placement(report, "c").reason is Reason.DENIED_NODE
    assert groups(report) == [{"a", "b"}]
    report = Partitioner([fake()], allow_ops=["Relu", "Mul"]).partition(p)
    assert placement(report, "b").reason is Reason.NOT_ALLOWED
    assert groups(report) == [{"a"}, {"c"}]


def test_min_ops_dissolves_small_partitions():
    nodes = [("a", "Relu", ["x"]), ("b", "Relu", ["a"]), ("n", "Neg", ["b"]), ("c", "Relu", ["n"])]
    report = Partitioner([fake()], min_ops=2).partition(build(nodes, ["c"]))
    assert groups(report) == [{"a", "b"}]
    assert placement(report, "c").reason is Reason.BELOW_MIN_SIZE
    assert [part.id for part in report.partitions] == [0]


def _if_program(backend_ops):
    x = Value("x", F32)
    cond = Value("cond", TensorType(DataType.BOOL, ()))
    body = Block("main", inputs=[x, cond])
    a = body.append(Operation("Relu", [x], name="a", output_names=["a"]))
    a.outputs[0].type = F32
    branches = {}
    for branch in ("then_branch", "else_branch"):
        b = Block(branch)
        r = b.append(Operation("Relu", [a.outputs[0]], name=f"{branch}_relu", output_names=[f"{branch}_r"]))
        r.outputs[0].type = F32
        b.outputs = [r.outputs[0]]
        branches[branch] = b
    iff = body.append(Operation("If", [cond], branches, name="if", output_names=["y"]))
    iff.outputs[0].type = F32
    body.outputs = [iff.outputs[0]]
    from offload.ir import Function, Program

    return Program({"main": Function("main", body, {"": 21})})


def test_control_flow_body_ops_stay_on_cpu():
    report = Partitioner([fake()]).partition(_if_program(SUP))
    assert groups(report) == [{"a"}]
    assert placement(report, "if").reason is Reason.NO_BACKEND
    inner = placement(report, "then_branch_relu")
    assert inner.reason is Reason.CONTROL_FLOW_BODY and inner.nested
    assert report.summary()["ops"] == 2


def test_claimed_if_takes_its_bodies_along():
    report = Partitioner([FakeBackend("cf", SUP | {"If"})]).partition(_if_program(SUP))
    assert groups(report) == [{"a", "if"}]
    assert placement(report, "else_branch_relu").partition == 0


def test_format_report_has_a_row_per_op_and_a_summary():
    nodes = [("a", "Relu", ["x"]), ("n", "Neg", ["a"])]
    text = format_report(Partitioner([fake()]).partition(build(nodes, ["n"])))
    assert "fake#0" in text and "no backend supports it: fake: fake does not do Neg" in text
    assert "delegated ops: 1/2 (50.0%)" in text and "boundary tensors: 2, 48 bytes" in text


def test_dynamic_boundary_is_counted_as_unknown():
    p = build([("a", "Relu", ["x"]), ("n", "Neg", ["a"])], ["n"])
    p.main.inputs[0].type = TensorType(DataType.FLOAT, ("N", 3))
    s = Partitioner([fake()]).partition(p).summary()
    assert s["boundary_unknown"] == 1 and s["boundary_bytes"] == 24


def test_merging_never_closes_a_loop_through_another_partition():
    # b1 depends on partition {a1, a2} (through CPU op c); that partition depends on b2
    # (through CPU op d). b1 and b2 are independent, but as one delegate they would both
    # feed and read {a1, a2}: a cycle once each partition is collapsed into one op.
    nodes = [
        ("a1", "Relu", ["x"]),
        ("c", "Neg", ["a1"]),
        ("b1", "Relu", ["c"]),
        ("b2", "Relu", ["y"]),
        ("d", "Neg", ["b2"]),
        ("a2", "Add", ["a1", "d"]),
    ]
    report = Partitioner([fake()]).partition(build(nodes, ["b1", "a2"], inputs=("x", "y")))
    assert sorted(groups(report), key=len) == [{"b1"}, {"b2"}, {"a1", "a2"}]
