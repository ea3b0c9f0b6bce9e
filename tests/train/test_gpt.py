"""The GPT model: graph structure, and training equal to PyTorch and to one worker.

A 2-layer tiny GPT trains 3 SGD steps on data parallelism and on a Megatron-style plan
over 2 CPU workers (q/k/v and fc split by columns, attention by heads, proj and
mlp.proj by rows as split reductions, the vocabulary split in the embedding, the head
and the loss) and ends within 1e-4 of an equivalent PyTorch model, whose weights it
loads by name with Trainer.set_weights.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.errors import GraphError, ShapeError

from training_checks import RTOL, assert_close_weights

N, T, V, D, H, L = 4, 8, 64, 32, 4, 2


def test_gpt2_small_has_gpt2s_parameter_count_plus_an_untied_head():
    g = sw.models.gpt()
    d, v, s, layers = 768, 50257, 1024, 12
    per_layer = 2 * 2 * d + 4 * (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    tied = v * d + s * d + layers * per_layer + 2 * d
    assert tied == 124_439_808                      # GPT-2 small, as published
    assert g.num_parameters() == tied + v * d       # lm_head has its own weight
    assert g["loss"].shape == (8, 1024, v)
    assert g["h.0.attn.scores"].shape == (8, 12, 1024, 1024)


def test_gpt_refuses_heads_that_do_not_divide_the_width():
    with pytest.raises(ShapeError, match="multiple of heads"):
        sw.models.gpt(d_model=30, heads=4)
    with pytest.raises(ShapeError, match="positive"):
        sw.models.gpt(layers=0)


def test_embedding_needs_integer_id_inputs():
    g = sw.Graph("g")
    x = g.input("x", (2, 3))
    with pytest.raises(GraphError, match="dtype='int64'"):
        g.embedding(x, 10, 4)


def megatron_spec(g: sw.Graph, k: int = 2) -> dict:
    return sw.models.megatron_spec(g, k)


def plans(g: sw.Graph) -> dict[str, sw.Plan]:
    d = sw.DeviceGraph.cpu(2)
    return {"one": sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}),
            "data": sw.strategies.data_parallel(g, d),
            "megatron": sw.Plan.from_dict(g, d, megatron_spec(g), options=sw.CostOptions(reduction_splits=True))}


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, V, (N, T + 1))
    return tokens[:, :-1], tokens[:, 1:]     # next-token prediction


@pytest.mark.parametrize("plan", ["one", "data", "megatron"])
def test_tiny_gpt_trains_like_pytorch(plan):
    torch = pytest.importorskip("torch")
    from torch_gpt import TorchGPT

    torch.manual_seed(0)
    model = TorchGPT(L, D, H, T, V)
    g = sw.models.gpt_tiny(batch=N, layers=L, d_model=D, heads=H, seq=T, vocab=V)
    t = sw.Trainer(g, plans(g)[plan], optimizer=sw.SGD(lr=0.5))
    t.set_weights({k: v.detach().numpy() for k, v in model.state_dict().items()})
    ids, labels = data()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    want = []
    for _ in range(3):
        opt.zero_grad()
        loss = model.loss(torch.from_numpy(ids), torch.from_numpy(labels))
        loss.backward()
        opt.step()
        want.append(loss.item())
    got = [t.step(ids, labels) for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(t.get_weights(), {k: v.detach().numpy() for k, v in model.state_dict().items()})
    assert got[2] < got[0]   # it learns


def test_megatron_plan_keeps_attention_local_to_its_heads():
    """From the column-split q/k/v through the scores, softmax and value product to the
    merge before the row-split projection, each worker works on its own heads: the
    lowering moves no bytes into any of those ops (Megatron-LM's point)."""
    g = sw.models.gpt_tiny(batch=N)
    p = plans(g)["megatron"]
    assert p["h.0.attn.scores"]["c"] == 2 and p["h.0.attn.scores"].workers == 2
    assert p["h.0.mlp.proj"].reduction_degree == 2
    inside = {op.name for op in g.ops if op.name.startswith("h.") and (".attn." in op.name or op.name.endswith(".attn"))
              and not op.name.endswith((".q", ".k", ".v", ".proj", ".residual"))}
    assert len(inside) == 2 * 11   # per layer: 3 x (split, heads), scores, probs, attn, merge, concat
    tg = sw.lower(p)
    moved = [t for t in tg.tasks if t.kind == "copy" and t.op in inside and t.nbytes > 0]
    assert moved == []
    assert any(t.kind == "copy" and t.nbytes > 0 and t.op.endswith(".attn.proj") for t in tg.tasks)   # partial sums


def test_searched_plan_trains_like_one_worker():
    g = sw.models.gpt_tiny(batch=N)
    ids, labels = data(1)
    one = sw.Trainer(g, plans(g)["one"], optimizer=sw.SGD(lr=0.5))
    many = sw.Trainer(g, sw.search(g, sw.DeviceGraph.cpu(4)), optimizer=sw.SGD(lr=0.5))
    np.testing.assert_allclose([many.step(ids, labels) for _ in range(2)], [one.step(ids, labels) for _ in range(2)],
                               rtol=RTOL)
    assert_close_weights(many.get_weights(), one.get_weights())


def test_bad_token_ids_and_labels_raise_before_any_step():
    g = sw.models.gpt_tiny(batch=N)
    t = sw.Trainer(g, plans(g)["data"])
    ids, labels = data()
    before = t.get_weights()
    with pytest.raises(ShapeError, match="token ids in 0..63"):
        t.step(np.where(ids == ids[0, 0], V, ids), labels)
    with pytest.raises(ShapeError, match="token ids"):
        t.step(ids.astype(np.float32), labels)
    with pytest.raises(ShapeError, match=r"labels must be integers of shape \(4, 8\)"):
        t.step(ids, labels[:, 0])
    with pytest.raises(ShapeError, match="labels must lie in 0..63"):
        t.step(ids, labels + V)
    assert t.steps == 0
    for k, v in before.items():
        np.testing.assert_array_equal(t.get_weights()[k], v)


def test_runtime_refuses_bad_sequence_attributes_ids_and_labels():
    """The C runtime checks what the Trainer checks (a caller may reach it directly)."""
    from shardwise import _core
    from shardwise.iteration.lower import plan_arrays
    from shardwise.planning.problem import make_problem
    from shardwise.train.runtime import op_attrs

    g = sw.models.gpt_tiny(batch=N)
    plan = plans(g)["data"]
    args = (make_problem(g, plan.devices, plan.options), *plan_arrays(plan))
    attrs = op_attrs(g)
    probs, ln = g["h.0.attn.probs"].index, g["h.0.ln_1"].index
    for row, key, value, message in ((probs, "dim", 4, "softmax_dim's dim"), (ln, "eps", 0, "eps"),
                                     (0, "id_bound", -1, "'id_bound'"), (0, "id_bound", 2**24 + 1, "'id_bound'")):
        bad = [dict(a) for a in attrs]
        bad[row][key] = value
        with pytest.raises(ValueError, match=message):
            _core.Runtime(*args, bad, 2)
    # attributes travel by name: a forgotten or unknown one names the op and the attribute
    bad = [dict(a) for a in attrs]
    del bad[ln]["eps"]
    with pytest.raises(ValueError, match=r"op \d+ 'h\.0\.ln_1' \(layer_norm\): attribute 'eps' is missing"):
        _core.Runtime(*args, bad, 2)
    bad = [dict(a) for a in attrs]
    bad[probs]["axis"] = 1
    with pytest.raises(ValueError, match=r"'h\.0\.attn\.probs' \(softmax_dim\): unknown attribute 'axis' "
                                         r"\(softmax_dim takes dim, scale, causal\)"):
        _core.Runtime(*args, bad, 2)
    rt = _core.Runtime(*args, attrs, 2)
    ids, labels = data()
    rest = [None] * (len(g.ops) - 1)
    with pytest.raises(ValueError, match=r"token id 64 is out of range \[0, 64\)"):
        rt.forward([np.where(ids == ids[0, 0], V, ids)] + rest, labels)
    with pytest.raises(ValueError, match="integer"):
        rt.forward([ids.astype(np.float32)] + rest, labels)
    with pytest.raises(ValueError, match="2-D integer array of 32 entries"):
        rt.forward([ids] + rest, labels.reshape(-1))
    with pytest.raises(ValueError, match="labels must lie in 0..63"):
        rt.forward([ids] + rest, labels - 1)
    assert rt.forward([ids] + rest, labels) > 0


def test_megatron_plan_on_prioritized_streams_is_bitwise_the_fifo_run():
    g = sw.models.gpt_tiny(batch=N)
    ids, labels = data(2)
    p = plans(g)["megatron"]
    fifo = sw.Trainer(g, p, optimizer=sw.SGD(lr=0.5))
    crit = sw.Trainer(g, p, optimizer=sw.SGD(lr=0.5), schedule="critical_path")
    assert [fifo.step(ids, labels) for _ in range(2)] == [crit.step(ids, labels) for _ in range(2)]
    for k, v in fifo.get_weights().items():
        np.testing.assert_array_equal(crit.get_weights()[k], v)
