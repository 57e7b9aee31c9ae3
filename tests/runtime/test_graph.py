"""RuntimeGraph: states, the meet_num BFS, tracing, build-time checks and input checks."""

import warnings

import numpy as np
import pytest

import kuiper
from kuiper import BackendError, GraphError, GraphState, InputError, UnsupportedOperatorError
from kuiper.opencl.devices import spec_of

from conftest import MODELS, write_model

# x -> relu -> a;  x -> neg -> b;  add(a, b) -> c;  cat(c, a) -> d
BRANCHY = """7767517
6 5
pnnx.Input               in0     0 1 x #x=(1,2,3,3)f32
nn.ReLU                  relu    1 1 x a #x=(1,2,3,3)f32 #a=(1,2,3,3)f32
pnnx.Expression          neg     1 1 x b expr=neg(@0) #b=(1,2,3,3)f32
pnnx.Expression          add     2 1 a b c expr=add(@0,@1) #c=(1,2,3,3)f32
torch.cat                cat     2 1 c a d dim=1 #d=(1,4,3,3)f32
pnnx.Output              out     1 0 d
"""


def reference(x):
    a = np.maximum(x, 0)
    return np.concatenate([a - x, a], axis=1)


@pytest.fixture
def branchy(tmp_path):
    path = tmp_path / "branchy.pnnx.param"
    path.write_text(BRANCHY)
    return path


def test_states_and_forward_before_build(branchy):
    g = kuiper.RuntimeGraph(branchy, backend="numpy")
    assert g.state == GraphState.NEED_INIT
    with pytest.raises(GraphError, match="build"):
        g.forward(np.zeros((1, 2, 3, 3), np.float32))
    g.init()
    assert g.state == GraphState.NEED_BUILD
    g.build()
    assert g.state == GraphState.COMPLETE


def test_branchy_graph_forward_and_meet_num(branchy):
    g = kuiper.load(branchy, backend="reference")  # the file's operators, unfused
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 3), dtype=np.float32)
    (out,) = g.forward(x)
    np.testing.assert_allclose(out, reference(x))
    # every operator ends with meet_num == its number of inputs; they are reset by the next forward
    assert all(op.meet_num == len(op.input_operands) for op in g.operators)
    (out2,) = g.forward(-x)
    np.testing.assert_allclose(out2, reference(-x))
    assert [op.name for op in g.order] == ["in0", "relu", "neg", "add", "cat", "out"]


def test_tensors_are_handed_over_by_reference(branchy):
    g = kuiper.load(branchy, backend="numpy")
    g.forward(np.ones((1, 2, 3, 3), np.float32))
    relu = next(op for op in g.operators if op.name == "relu")
    for succ in relu.successors:
        slot = succ.input_operands.index(relu.output_operand)
        assert succ.input_operands[slot].tensor is relu.output_operand.tensor


def test_an_operator_reading_an_operand_twice_is_one_successor(tmp_path):
    # GPT-2's gelu_new as pnnx writes it: mul(add(@0,mul(pow(@1,3.0),0.044715)),...) with @0 and @1 one operand
    path = tmp_path / "twice.pnnx.param"
    path.write_text("""7767517
4 3
pnnx.Input       in0   0 1 x #x=(2,3)f32
nn.ReLU          relu  1 1 x a #a=(2,3)f32
pnnx.Expression  cube  2 1 a a b expr=add(@0,pow(@1,3.0)) #b=(2,3)f32
pnnx.Output      out   1 0 b
""")
    graph = kuiper.load(path, backend="reference")
    relu = next(op for op in graph.operators if op.name == "relu")
    assert [op.name for op in relu.successors] == ["cube"]
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    a = np.maximum(x, 0)
    np.testing.assert_allclose(graph.forward(x)[0], a + a ** 3, rtol=1e-6)


def test_trace_shows_order_and_meet_num(branchy, capsys):
    g = kuiper.load(branchy, backend="reference")
    g.forward(np.ones((1, 2, 3, 3), np.float32), trace=True)
    printed = capsys.readouterr().out
    assert printed.splitlines() == g.last_trace
    runs = [line.split()[1] for line in g.last_trace if line.startswith("run")]
    assert runs == ["in0", "relu", "neg", "add", "cat", "out"]
    add_probes = [line for line in g.last_trace if "probe add" in line]
    assert [p.split()[-1] for p in add_probes] == ["1/2", "2/2"]


def test_unknown_backend_is_a_clear_error(branchy):
    with pytest.raises(BackendError, match="unknown backend 'cuda'"):
        kuiper.RuntimeGraph(branchy, backend="cuda")


def test_unsupported_operator_names_type_and_operator(tmp_path):
    path = tmp_path / "m.pnnx.param"
    path.write_text(BRANCHY.replace("nn.ReLU                  relu", "nn.Mystery               relu"))
    g = kuiper.RuntimeGraph(path, backend="numpy").init()
    assert g.missing_types() == {"nn.Mystery": ["relu"]}
    with pytest.raises(UnsupportedOperatorError, match="'nn.Mystery' \\(operator relu\\)"):
        g.build()


def test_cycle_is_found_at_build_not_in_forward(branchy):
    g = kuiper.RuntimeGraph(branchy, backend="numpy").init()
    ops = {op.name: op for op in g.operators}
    # feed relu from add's output: relu -> add -> relu is a cycle nobody can start
    ops["relu"].input_operands = [ops["add"].output_operand]
    ops["add"].output_operand.consumers.append(ops["relu"])
    ops["in0"].output_operand.consumers.remove(ops["relu"])
    with pytest.raises(GraphError, match="can never run.*'relu'"):
        g.build()


def test_input_checks(branchy):
    g = kuiper.load(branchy, backend="numpy")
    good = np.zeros((1, 2, 3, 3), np.float32)
    with pytest.raises(InputError, match="takes 1 input"):
        g.forward(good, good)
    with pytest.raises(InputError, match=r"in0.*expected shape \(1,2,3,3\), given \(2,3,3\)"):
        g.forward(np.zeros((2, 3, 3), np.float32))
    with pytest.raises(InputError, match="float32"):
        g.forward(np.zeros((1, 2, 3, 3), np.int32))
    with pytest.raises(InputError, match="C-contiguous"):
        g.forward(np.zeros((1, 2, 3, 6), np.float32)[..., ::2])
    with pytest.raises(InputError, match="numpy array"):
        g.forward([[1.0]])
    with pytest.warns(kuiper.KuiperWarning, match="float64"):
        (out,) = g.forward(np.ones((1, 2, 3, 3)))
    np.testing.assert_allclose(out, reference(np.ones((1, 2, 3, 3), np.float32)))


def test_other_batch_and_spatial_sizes_get_their_own_plan(branchy):
    g = kuiper.load(branchy, backend="numpy")
    for shape in [(3, 2, 5, 4), (1, 2, 3, 3), (3, 2, 5, 4)]:
        x = np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
        (out,) = g.forward(x)
        np.testing.assert_allclose(out, reference(x))
    assert len(g.plans) == 2


def test_wrong_channel_count_is_an_input_error_naming_the_input_and_shapes():
    from conftest import model_paths

    g = kuiper.load(*model_paths("resnet18"), backend="numpy")
    with pytest.raises(InputError, match=r"'pnnx_input_0' expected \(1,3,224,224\), given \(1,4,224,224\).*convbn2d_0"):
        g.forward(np.zeros((1, 4, 224, 224), np.float32))


def test_inspect_style_plan_at_another_batch_reports_memory():
    from conftest import model_paths

    g = kuiper.load(*model_paths("resnet18"), backend="numpy")
    plan1, plan8 = g.plan_for((1, 3, 224, 224)), g.plan_for((8, 3, 224, 224))
    assert plan8.shapes[g.output_operands[0].name] == (8, 1000)
    # liveness planning shares buffers: far less than one buffer per tensor, and it scales with the batch
    assert plan1.pooled_bytes < plan1.unpooled_bytes() / 2
    assert plan8.pooled_bytes == 8 * plan1.pooled_bytes


# in-place activations and fusion (numpy): x is the caller's, c has two readers, g is a graph output
IN_PLACE = """7767517
10 9
pnnx.Input               in0     0 1 x #x=(1,2,3,3)f32
nn.ReLU                  r0      1 1 x y #y=(1,2,3,3)f32
pnnx.Expression          e1      1 1 x a expr=mul(@0,2) #a=(1,2,3,3)f32
nn.ReLU                  r1      1 1 a b #b=(1,2,3,3)f32
pnnx.Expression          e2      1 1 b c expr=sub(@0,1) #c=(1,2,3,3)f32
nn.ReLU                  r2      1 1 c d #d=(1,2,3,3)f32
nn.Hardtanh              h       1 1 d e min_val=0.0 max_val=0.5 #e=(1,2,3,3)f32
torch.cat                cat     3 1 c e y f dim=1 #f=(1,6,3,3)f32
nn.ReLU                  r3      1 1 f g #g=(1,6,3,3)f32
pnnx.Output              out     1 0 g
"""


def in_place_reference(x):
    b = np.maximum(2 * x, 0)
    c = b - 1
    e = np.clip(np.maximum(c, 0), 0, 0.5)
    return np.maximum(np.concatenate([c, e, np.maximum(x, 0)], axis=1), 0)


def fused_ops(graph) -> dict:
    """{fused operator: [the file's operators it does]} (runtime/fusion.py)."""
    return {op.name: [a.name for a in op.absorbed] for op in graph.order if op.absorbed}


def aliases(graph) -> dict:
    """{operand: the operand whose buffer it overwrites}."""
    return {o.name: o.overwrites.name for op in graph.order for o in op.output_operands if o.overwrites is not None}


def test_activations_overwrite_inputs_nothing_else_reads_and_fuse_into_producers(tmp_path):
    path = tmp_path / "in_place.pnnx.param"
    path.write_text(IN_PLACE)
    g = kuiper.load(path, backend="numpy")
    # r0 reads the caller's array, c is also read by cat, g is returned to the caller: those keep their own.
    # e1's fast layer applies r1's ReLU itself; h's producer r2 (a ReLU) cannot take the clamp: h works in place
    assert fused_ops(g) == {"e1": ["e1", "r1"]} and aliases(g) == {"e": "d"}
    assert [op.name for op in g.unfused_order if op.name in ("e1", "r1")] == ["e1", "r1"]  # the file's graph
    rng = np.random.default_rng(1)
    for _ in range(3):  # buffers stay right from one forward to the next
        x = rng.standard_normal((1, 2, 3, 3), dtype=np.float32)
        keep = x.copy()
        (out,) = g.forward(x)
        np.testing.assert_allclose(out, in_place_reference(keep), rtol=1e-6)
        np.testing.assert_array_equal(x, keep)  # the caller's input is never overwritten
    plan = next(iter(g.plans.values()))
    assert np.shares_memory(plan.tensors["e"].data, plan.tensors["d"].data)
    assert "e" not in plan.assignment.slot_of  # no buffer of its own
    g.forward(np.ones((1, 2, 3, 3), np.float32), trace=True)
    assert "run   e1                           pnnx.Expression+nn.ReLU" in g.last_trace


def test_the_reference_backend_runs_the_file_as_it_is(tmp_path):
    path = tmp_path / "in_place.pnnx.param"
    path.write_text(IN_PLACE)
    g = kuiper.load(path, backend="reference")
    assert fused_ops(g) == {} and aliases(g) == {} and len(g.order) == 10
    assert all(type(op.layer).__module__.startswith("kuiper.layers.") for op in g.order if op.layer is not None)
    x = np.random.default_rng(3).standard_normal((1, 2, 3, 3), dtype=np.float32)
    np.testing.assert_allclose(g.forward(x)[0], in_place_reference(x), rtol=1e-6)


def test_opencl_graphs_work_in_place_without_fusing(tmp_path, cl_runtime):
    # the OpenCL layers apply no epilogue themselves yet, so nothing fuses; activations still overwrite inputs
    path = tmp_path / "in_place.pnnx.param"
    path.write_text(IN_PLACE)
    for schedule in ("inorder", "levels"):
        g = kuiper.load(path, backend="opencl", device=spec_of(cl_runtime.device), schedule=schedule)
        assert fused_ops(g) == {} and aliases(g) == {"b": "a", "e": "d"}
        x = np.random.default_rng(2).standard_normal((1, 2, 3, 3), dtype=np.float32)
        np.testing.assert_allclose(g.forward(x)[0], in_place_reference(x), rtol=1e-6)


# TNT's pixel embedding: a convolution over a batch of patches, plus positions of batch 1 broadcast to them
BROADCAST_SUM = """7767517
6 5
pnnx.Input               in0     0 1 x #x=(4,2,5,5)f32
pnnx.Input               in1     0 1 p #p=(1,3,5,5)f32
nn.Conv2d                conv    1 1 x y bias=True dilation=(1,1) groups=1 in_channels=2 kernel_size=(3,3) out_channels=3 padding=(1,1) padding_mode=zeros stride=(1,1) @bias=(3)f32 @weight=(3,2,3,3)f32 #x=(4,2,5,5)f32 #y=(4,3,5,5)f32
pnnx.Expression          add     2 1 y p z expr=add(@0,@1) #y=(4,3,5,5)f32 #p=(1,3,5,5)f32 #z=(4,3,5,5)f32
nn.ReLU                  relu    1 1 z r #z=(4,3,5,5)f32 #r=(4,3,5,5)f32
pnnx.Output              out     1 0 r
"""


def test_a_sum_broadcasting_its_other_input_is_not_fused(tmp_path):
    rng = np.random.default_rng(5)
    weight, bias = rng.standard_normal((3, 2, 3, 3)), rng.standard_normal(3)
    path = write_model(tmp_path, "broadcast_sum", BROADCAST_SUM, {"conv.weight": weight, "conv.bias": bias})
    x, positions = rng.standard_normal((4, 2, 5, 5), dtype=np.float32), rng.standard_normal((1, 3, 5, 5),
                                                                                            dtype=np.float32)
    expected = kuiper.load(path, backend="reference").forward(x, positions)[0]
    g = kuiper.load(path, backend="numpy")
    assert fused_ops(g) == {} and aliases(g) == {"z": "y"}  # the sum works in place, on its own (so does the
    # ReLU, but the graph returns its output)
    np.testing.assert_allclose(g.forward(x, positions)[0], expected, rtol=1e-5, atol=1e-5)


# views (runtime/fusion.py): v1 and v2 are their input's only readers; h then clamps d in place, so e, d, c share
# c's buffer. flatten f reads the caller's array, v3's input e is read by cat too, v4 and r3 write graph outputs
VIEWS = """7767517
12 11
pnnx.Input               in0     0 1 x #x=(1,2,3,4)f32
nn.ReLU                  r0      1 1 x a #a=(1,2,3,4)f32
Tensor.reshape           v1      1 1 a b shape=(1,6,4) #b=(1,6,4)f32
pnnx.Expression          p       1 1 b c expr=mul(@0,2) #c=(1,6,4)f32
Tensor.reshape           v2      1 1 c d shape=(1,24) #d=(1,24)f32
nn.Hardtanh              h       1 1 d e min_val=-0.5 max_val=0.5 #e=(1,24)f32
torch.flatten            f       1 1 x g start_dim=1 end_dim=-1 #g=(1,24)f32
Tensor.view              v3      1 1 e h shape=(1,4,6) #h=(1,4,6)f32
nn.ReLU                  r3      1 1 h n #n=(1,4,6)f32
torch.cat                cat     2 1 e g k dim=1 #k=(1,48)f32
Tensor.reshape           v4      1 1 k m shape=(2,24) #m=(2,24)f32
pnnx.Output              out     2 0 n m
"""


def views_reference(x):
    e = np.clip(2 * np.maximum(x, 0).reshape(1, 24), -0.5, 0.5)
    return [np.maximum(e.reshape(1, 4, 6), 0), np.concatenate([e, x.reshape(1, 24)], axis=1).reshape(2, 24)]


def check_views(g, same_buffer) -> None:
    assert aliases(g) == {"b": "a", "d": "c", "e": "d"}
    rng = np.random.default_rng(4)
    for _ in range(3):  # buffers stay right from one forward to the next
        x = rng.standard_normal((1, 2, 3, 4), dtype=np.float32)
        keep = x.copy()
        for got, want in zip(g.forward(x), views_reference(keep)):
            np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_array_equal(x, keep)
    plan = next(iter(g.plans.values()))
    assert not {"b", "d", "e"} & set(plan.assignment.slot_of)  # no buffers of their own
    assert plan.tensors["b"].shape == (1, 6, 4) and plan.tensors["e"].shape == (1, 24)
    assert same_buffer(plan.tensors["b"], plan.tensors["a"]) and same_buffer(plan.tensors["e"], plan.tensors["c"])


def test_reshapes_whose_input_nothing_else_reads_are_views_of_its_buffer(tmp_path):
    path = tmp_path / "views.pnnx.param"
    path.write_text(VIEWS)
    check_views(kuiper.load(path, backend="numpy"), lambda t, u: np.shares_memory(t.data, u.data))


def test_opencl_reshapes_are_views_too(tmp_path, cl_runtime):
    path = tmp_path / "views.pnnx.param"
    path.write_text(VIEWS)
    for schedule in ("inorder", "levels"):
        g = kuiper.load(path, backend="opencl", device=spec_of(cl_runtime.device), schedule=schedule)
        check_views(g, lambda t, u: t.buffer is u.buffer)


# copy chains (runtime/copies.py): a window partition v1..t1, cut after p1 because r4 reads c too; a chunk whose
# pieces go through reshape -> permute (the third only to a ReLU); p5 -> v5 reads a transposed (8, 6) as (6, 8),
# which no single walk does
CHAINS = """7767517
18 19
pnnx.Input               in0     0 1 x #x=(1,4,6,8)f32
nn.ReLU                  r0      1 1 x a #a=(1,4,6,8)f32
Tensor.reshape           v1      1 1 a b shape=(1,4,3,2,4,2) #b=(1,4,3,2,4,2)f32
Tensor.permute           p1      1 1 b c dims=(0,2,4,3,5,1) #c=(1,3,4,2,2,4)f32
Tensor.reshape           v2      1 1 c d shape=(1,12,16) #d=(1,12,16)f32
torch.transpose          t1      1 1 d e dim0=1 dim1=2 #e=(1,16,12)f32
torch.chunk              ch      1 3 e f0 f1 f2 chunks=3 dim=-1 #f0=(1,16,4)f32 #f1=(1,16,4)f32 #f2=(1,16,4)f32
Tensor.reshape           v3      1 1 f0 g0 shape=(1,16,2,2) #g0=(1,16,2,2)f32
Tensor.permute           p3      1 1 g0 h0 dims=(0,2,1,3) #h0=(1,2,16,2)f32
Tensor.reshape           v4      1 1 f1 g1 shape=(1,16,2,2) #g1=(1,16,2,2)f32
Tensor.permute           p4      1 1 g1 h1 dims=(0,3,1,2) #h1=(1,2,16,2)f32
nn.ReLU                  r2      1 1 f2 h2 #h2=(1,16,4)f32
Tensor.permute           p5      1 1 a k dims=(0,1,3,2) #k=(1,4,8,6)f32
Tensor.reshape           v5      1 1 k m shape=(1,4,6,8) #m=(1,4,6,8)f32
pnnx.Expression          add     2 1 h0 h1 n expr=add(@0,@1) #n=(1,2,16,2)f32
nn.ReLU                  r3      1 1 m o #o=(1,4,6,8)f32
nn.ReLU                  r4      1 1 c q #q=(1,3,4,2,2,4)f32
pnnx.Output              out     4 0 n h2 o q
"""


def chains_reference(x):
    a = np.maximum(x, 0)
    b = len(x)
    c = a.reshape(b, 4, 3, 2, 4, 2).transpose(0, 2, 4, 3, 5, 1)
    e = c.reshape(b, 12, 16).transpose(0, 2, 1)
    f0, f1, f2 = np.split(e, 3, axis=-1)
    h0 = f0.reshape(b, 16, 2, 2).transpose(0, 2, 1, 3)
    h1 = f1.reshape(b, 16, 2, 2).transpose(0, 3, 1, 2)
    return [h0 + h1, np.maximum(f2, 0), np.maximum(a.transpose(0, 1, 3, 2).reshape(a.shape), 0),
            np.maximum(c, 0)]


def check_chains(g) -> None:
    chains = {op.name: [a.name for a in op.absorbed] for op in g.order if type(op.layer).__name__ == "CopyChain"}
    assert chains == {"v1": ["v1", "p1"], "v2": ["v2", "t1"], "ch[0]": ["ch", "v3", "p3"], "ch[1]": ["ch", "v4", "p4"],
                      "ch[2]": ["ch"], "p5": ["p5", "v5"]}
    layers = {op.name: op.layer for op in g.order}
    assert len(layers["v1"].copies((1, 4, 6, 8))) == 1 and len(layers["p5"].copies((1, 4, 6, 8))) == 2
    rng = np.random.default_rng(5)
    for batch in (1, 2, 1):
        x = rng.standard_normal((batch, 4, 6, 8), dtype=np.float32)
        for got, want in zip(g.forward(x), chains_reference(x)):
            np.testing.assert_array_equal(got, want)


def test_chains_of_moving_operators_are_one_copy(tmp_path):
    path = tmp_path / "chains.pnnx.param"
    path.write_text(CHAINS)
    check_chains(kuiper.load(path, backend="numpy"))
    assert len(kuiper.load(path, backend="reference").order) == 18  # the reference runs the file as it is


def test_opencl_chains_of_moving_operators_are_one_copy(tmp_path, cl_runtime):
    path = tmp_path / "chains.pnnx.param"
    path.write_text(CHAINS)
    for schedule in ("inorder", "levels"):
        check_chains(kuiper.load(path, backend="opencl", device=spec_of(cl_runtime.device), schedule=schedule))


def test_resnet_fuses_every_relu_and_residual_add_into_convolutions_on_numpy():
    resnet = kuiper.load("models/resnet18/resnet18.pnnx.param", backend="numpy")
    types = {op.name: op.type for op in resnet.unfused_order}
    relus = {name for name, t in types.items() if t == "nn.ReLU"}
    adds = {name for name, t in types.items() if t == "pnnx.Expression"}
    fused = fused_ops(resnet)
    done = [name for parts in fused.values() for name in parts[1:]]
    assert len(relus) == 17 and len(adds) == 8 and sorted(done) == sorted(relus | adds)
    assert {types[main] for main in fused} == {"nn.Conv2d"}  # every one into a convolution
    # a residual add's other tensor is an ordinary input of the fused convolution, after the convolution's own
    for op in resnet.order:
        if {a.name for a in op.absorbed} & adds:
            step = next(s for s in op.layer.steps if s.extra is not None)
            assert step.extra == 1 and len(op.input_operands) == 2
    assert len(resnet.order) == len(resnet.unfused_order) - 25


def test_winograd_weights_are_made_when_planning_not_in_forward():
    resnet = kuiper.load("models/resnet18/resnet18.pnnx.param", backend="numpy")  # build plans the recorded 1x3x224x224
    convs = {op.name: op.layer.main if op.absorbed else op.layer for op in resnet.order
             if op.type.startswith("nn.Conv2d")}

    def built(name):
        return sorted(v.name for v in convs[name].variants.by_name.values() if v.built)
    assert built("convbn2d_1") == ["winograd_f4"] and built("convbn2d_12") == ["winograd_f2"]
    assert "winograd" not in " ".join(built("convbn2d_17"))  # 7x7: im2col
    resnet.plan_for((1, 3, 112, 112))  # layer2 now sees 14x14 images: F(2x2) too, before any forward
    assert built("convbn2d_7") == ["winograd_f2", "winograd_f4"]


CONV = "in_channels=2 out_channels=2 kernel_size=(1,1) stride=(1,1) padding=(0,0) dilation=(1,1) groups=1 " \
       "bias=True @weight=(2,2,1,1)f32 @bias=(2)f32"
# c1's output plus the graph input: fused into c1 (then the ReLU too); add(c, d): d's producer c4 runs after c3,
# so the sum goes to c4 with c as its extra input; add4 reads e, which cat reads too
SUMS = f"""7767517
12 11
pnnx.Input               in0     0 1 x #x=(1,2,4,4)f32
nn.Conv2d                c1      1 1 x a {CONV} #a=(1,2,4,4)f32
pnnx.Expression          add1    2 1 a x s expr=add(@0,@1) #s=(1,2,4,4)f32
nn.ReLU                  r1      1 1 s t #t=(1,2,4,4)f32
nn.Conv2d                c3      1 1 t c {CONV} #c=(1,2,4,4)f32
nn.Conv2d                c4      1 1 t d {CONV} #d=(1,2,4,4)f32
pnnx.Expression          add3    2 1 c d u expr=add(@0,@1) #u=(1,2,4,4)f32
nn.Conv2d                c5      1 1 x e {CONV} #e=(1,2,4,4)f32
pnnx.Expression          add4    2 1 e u v expr=add(@1,@0) #v=(1,2,4,4)f32
torch.cat                cat     2 1 v e w dim=1 #w=(1,4,4,4)f32
nn.Tanh                  th      1 1 w y #y=(1,4,4,4)f32
pnnx.Output              out     1 0 y
"""


def test_sums_fuse_into_the_producer_of_an_input_only_they_read(tmp_path):
    rng = np.random.default_rng(7)
    weights = {f"{c}.{k}": rng.standard_normal((2, 2, 1, 1) if k == "weight" else 2)
               for c in ("c1", "c3", "c4", "c5") for k in ("weight", "bias")}
    path = write_model(tmp_path, "sums", SUMS, weights)
    g = kuiper.load(path, backend="numpy")
    # c1 takes the sum with the graph input x, then the ReLU; c3 takes add3 (d, c4's output, becomes its input)
    # and then add4, whose other input e has two readers (add4 and cat) and so stays where it is
    assert fused_ops(g) == {"c1": ["c1", "add1", "r1"], "c3": ["c3", "add3", "add4"]} and aliases(g) == {}
    c3 = next(op for op in g.order if op.name == "c3")
    assert [o.name for o in c3.input_operands] == ["t", "d", "e"] and c3.output_operand.name == "v"

    def conv(name, v):
        w, b = weights[f"{name}.weight"].reshape(2, 2), weights[f"{name}.bias"]
        return np.einsum("oc,nchw->nohw", w, v) + b.reshape(1, 2, 1, 1)

    for _ in range(2):
        x = rng.standard_normal((1, 2, 4, 4), dtype=np.float32)
        t = np.maximum(conv("c1", x) + x, 0)
        e = conv("c5", x)
        expected = np.tanh(np.concatenate([e + conv("c3", t) + conv("c4", t), e], axis=1))
        np.testing.assert_allclose(g.forward(x)[0], expected, rtol=1e-5, atol=1e-6)


# ---- what the fuzzer found: graph shapes, empty tensors, unknown parameters --------------------
def write_param(tmp_path, text, name="g"):
    path = tmp_path / f"{name}.pnnx.param"
    path.write_text(text)
    return path


NESTED = """7767517
6 5
pnnx.Input               in0     0 1 x #x=(1,2)f32
nn.ReLU                  r       1 1 x a #a=(1,2)f32
nn.Tanh                  t       1 1 x b #b=(1,2)f32
prim::TupleConstruct     inner   2 1 a b ab
prim::TupleConstruct     outer   2 1 ab x all
pnnx.Output              out     1 0 all
"""


@pytest.mark.parametrize("backend", ["numpy", "reference"])
def test_nested_tuples_are_unpacked_in_order(tmp_path, backend):
    g = kuiper.load(write_param(tmp_path, NESTED), backend=backend)
    x = np.array([[-1.0, 2.0]], np.float32)
    relu, tanh, same = g.forward(x)
    np.testing.assert_allclose(relu, [[0.0, 2.0]])
    np.testing.assert_allclose(tanh, np.tanh(x), rtol=1e-6)
    np.testing.assert_array_equal(same, x)


@pytest.mark.parametrize("edit, message", [
    # a tuple read by a layer: forward would hand the layer a Python tuple
    (lambda t: t.replace("pnnx.Output              out     1 0 all", "nn.ReLU r2 1 1 ab c\npnnx.Output out 1 0 c")
     .replace("6 5", "7 6"),
     r"g.pnnx.param:6: prim::TupleConstruct operator 'inner' is read by nn.ReLU operator 'r2' \(line 8\); "
     r"only pnnx.Output unpacks a tuple"),
    # an output whose output operand an operator reads
    (lambda t: t.replace("pnnx.Output              out     1 0 all", "pnnx.Output out 1 1 all o\nnn.ReLU r2 1 1 o c")
     .replace("6 5", "7 7"),
     r"g.pnnx.param:8: pnnx.Output operator 'out' has 1 input\(s\) and 1 output\(s\); a graph output reads at "
     r"least one operand and makes none"),
    # no output: forward would return []
    (lambda t: t.replace("pnnx.Output              out     1 0 all\n", "").replace("6 5", "5 5"),
     r"g.pnnx.param:7: the graph has no pnnx.Output, so forward would return nothing"),
    # an input with an input
    (lambda t: t.replace("pnnx.Input               in0     0 1 x", "pnnx.Input in0 0 1 x\npnnx.Input in1 1 1 x y")
     .replace("6 5", "7 6"),
     r"g.pnnx.param:4: pnnx.Input operator 'in1' has 1 input\(s\) and 1 output\(s\); a graph input has 0 and 1"),
])
def test_graph_shapes_forward_cannot_run_are_refused_at_load_with_file_and_line(tmp_path, edit, message):
    with pytest.raises(GraphError, match=message):
        kuiper.load(write_param(tmp_path, edit(NESTED)), backend="numpy")


def test_a_layer_making_fewer_outputs_than_the_file_lists_is_refused(tmp_path):
    text = NESTED.replace("nn.Tanh                  t       1 1 x b #b=(1,2)f32", "nn.Tanh t 1 2 x b b2")
    with pytest.raises(kuiper.ShapeError, match=r"g.pnnx.param:5: nn.Tanh operator 't' makes 1 output\(s\), the "
                                                r"file lists 2"):
        kuiper.load(write_param(tmp_path, text.replace("6 5", "6 6")), backend="reference")


RELU_ONLY = """7767517
3 2
pnnx.Input               in0     0 1 x #x=(2,3)f32
nn.ReLU                  relu    1 1 x y #y=(2,3)f32
pnnx.Output              out     1 0 y
"""


@pytest.mark.parametrize("shape", [(0, 3), (2, 0)])
def test_empty_inputs_are_input_errors_on_every_model(tmp_path, shape):
    # a ReLU-only model used to return an empty array where a convolution failed with numpy's ValueError
    relu = kuiper.load(write_param(tmp_path, RELU_ONLY), backend="numpy")
    with pytest.raises(InputError, match=r"pnnx.Input operator 'in0' makes operand x of shape \((0,3|2,0)\); "
                                         r"every dim must be at least 1"):
        relu.forward(np.zeros(shape, np.float32))
    conv = kuiper.load(MODELS / "conv_zoo" / "conv_zoo.pnnx.param", backend="numpy")
    with pytest.raises(InputError, match=r"given \(0,3,15,17\)"):
        conv.forward(np.zeros((0, 3, 15, 17), np.float32))


def test_an_empty_recorded_input_is_refused_at_build(tmp_path):
    with pytest.raises(kuiper.ShapeError, match=r"g.pnnx.param:3: pnnx.Input operator 'in0' makes operand x of "
                                                r"shape \(0,3\)"):
        kuiper.load(write_param(tmp_path, RELU_ONLY.replace("(2,3)", "(0,3)")), backend="numpy")


def test_unknown_parameters_are_layer_errors(tmp_path):
    text = RELU_ONLY.replace("nn.ReLU                  relu    1 1 x y", "nn.ReLU relu 1 1 x y frobnicate=7 inplace=maybe")
    for backend in ("numpy", "reference"):
        with pytest.raises(kuiper.LayerError, match=r"nn.ReLU operator 'relu': unknown parameter\(s\) frobnicate, "
                                                    r"inplace \(this layer reads: none\)"):
            kuiper.load(write_param(tmp_path, text), backend=backend)


def test_dropouts_options_are_harmless_at_inference(tmp_path):
    text = RELU_ONLY.replace("nn.ReLU                  relu    1 1 x y", "F.dropout drop 1 1 x y p=0.5 training=False")
    (y,) = kuiper.load(write_param(tmp_path, text), backend="numpy").forward(np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(y, 1.0)
