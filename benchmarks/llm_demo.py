"""The bundled demo through a local model: time per `add` and behind it (the LLM queue), per answer, calls and tokens by stage,
units kept / rejected / from the rule fallback, every unit with its turn, the rank of each question's
evidence turn in a search of the LLM-built memory and of one built by the rule extractor, and the
answers beside their evidence (docs/llm.md, "Measured on this machine").

    python -m benchmarks.llm_demo --model qwen-0.5b [--out results.json] [--answer-context turns]
                                  [--answer-style short] [--answer-top-k K ...] [--answers-only]

`--answer-context` sets `Config.answer_context` for the answers; `--answers-only` builds the memory
with the rule extractor (no LLM in the construction) and asks the model the demo's questions under
both answer contexts, "packet" and "turns", so the two are read from the same memory.

Needs the `local-llm` extra and the model (`etamem llm fetch --model NAME`); starts llama-cpp-python's
server on a free loopback port with 2 threads and stops it at the end.
"""
from __future__ import annotations

import argparse
import json
import time
from importlib import resources
from itertools import groupby

from etamem import Config, Memory
from etamem.models import local_llm
from etamem.models.llm import PLACEHOLDER_API_KEY


def _demo() -> dict:
    return json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))


def _answers(mem: Memory, doc: dict, turns: dict, top_k: int | None = None) -> list[dict]:
    out = []
    for q in doc["questions"]:
        t = time.perf_counter()
        ans = mem.answer(q["question"], space=doc["space"], now=q["now"], top_k=top_k)
        out.append({"question": q["question"], "answer": ans.text, "llm": ans.llm_used,
                    "s": round(time.perf_counter() - t, 1),
                    "evidence": [turns[e].text for e in q["evidence"] if e in turns]})
    return out


def answers_only(model_name: str, threads: int = 2, cache: str | None = None, style: str = "locomo",
                 top_ks: tuple[int, ...] = (10,)) -> dict:
    """The demo's questions answered by `model_name` over the rule extractor's memory, once per
    answer context ("packet", "turns") and evidence count in `top_ks`, under the answer prompt
    `style`: what the answer prompt alone changes."""
    model = local_llm.known_model(model_name)
    doc = _demo()
    record: dict = {"model": model.name, "construction": "rule extractor, no LLM", "answer_style": style,
                    "answers": {}}
    with local_llm.LocalServer(local_llm.resolve_model(model_name), alias=model.name, threads=threads) as srv:
        for context in ("packet", "turns"):
            cfg = Config(llm_model=model.name, llm_base_url=srv.base_url, llm_api_key=PLACEHOLDER_API_KEY,
                         llm_response_format="json_object", top_k=10, llm_cache_path=cache, extractor="rule",
                         supersession="rules", restatements="rules", llm_summaries=False, answer_context=context,
                         answer_style=style)
            with Memory(config=cfg) as mem:
                add_demo(mem, doc)
                turns = {t.turn_id: t for t in mem.turns(doc["space"])}
                for k in top_ks:
                    record["answers"][context if len(top_ks) == 1 else f"{context}, top {k}"] = _answers(mem, doc, turns, k)
    return record


def run(model_name: str, threads: int = 2, cache: str | None = None, answer_context: str = "packet",
        style: str = "locomo", answer_top_k: int = 10) -> dict:
    """The demo through `model_name` (a known model or its alias): the measured record. `cache`: an
    LLM reply cache file kept between runs (a rerun with the same prompts asks the model nothing)."""
    model = local_llm.known_model(model_name)
    doc = _demo()
    space = doc["space"]
    with local_llm.LocalServer(local_llm.resolve_model(model_name), alias=model.name, threads=threads) as srv:
        cfg = Config(llm_model=model.name, llm_base_url=srv.base_url, llm_api_key=PLACEHOLDER_API_KEY,
                     llm_response_format="json_object", top_k=10,
                     llm_cache_path=cache, answer_context=answer_context, answer_style=style)
        with Memory(config=cfg) as mem:
            t0 = time.perf_counter()
            add_demo(mem, doc)
            add_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            mem.flush(space)  # the model's extraction, links and summaries behind the adds (Config.llm_background)
            flush_s = time.perf_counter() - t1
            turns = {t.turn_id: t for t in mem.turns(space)}
            record = {
                "model": model.name, "answer_context": answer_context, "answer_style": style,
                "answer_top_k": answer_top_k, "turns": len(doc["turns"]),
                "add_s": round(add_s, 1),
                "s_per_turn": round(add_s / len(doc["turns"]), 2), "flush_s": round(flush_s, 1),
                "llm_s_per_turn": round((add_s + flush_s) / len(doc["turns"]), 2),
                "extraction": mem.stats(space)["extraction"],
                "llm_usage": {k: {"calls": v.calls, "prompt_tokens": v.prompt_tokens, "completion_tokens":
                                  v.completion_tokens, "s": round(v.seconds, 1)} for k, v in mem.llm.usage().items()},
                "units": [{"turn": u.source_turn_ids[0], "speaker": turns[u.source_turn_ids[0]].speaker,
                           "text": u.text} for u in mem.list(space)],
            }
            record["evidence_rank"] = {"llm": evidence_ranks(mem, doc)}
            record["answers"] = _answers(mem, doc, turns, answer_top_k)
    # the same demo with the offline extractor and no LLM path, whatever $ETAMEM_LLM_MODEL says
    rule_cfg = Config(extractor="rule", supersession="rules", restatements="rules", llm_summaries=False, top_k=10)
    with Memory(config=rule_cfg) as rule_mem:
        add_demo(rule_mem, doc)
        record["rule_units"] = rule_mem.stats(space)["amus"]
        record["evidence_rank"]["rule"] = evidence_ranks(rule_mem, doc)
    return record


def add_demo(mem: Memory, doc: dict) -> None:
    """The demo's turns added to `mem` one session per `add`, the last session ended."""
    for _, session in groupby(doc["turns"], key=lambda t: t["session_id"]):
        mem.add(list(session), space=doc["space"])
    mem.end_session(doc["space"])


def evidence_ranks(mem: Memory, doc: dict, k: int = 20) -> list[int | None]:
    """Per demo question: the rank (1-based) of its first evidence turn among the distinct source
    turns of `mem.search(question, top_k=k)` (None: not among them)."""
    space, out = doc["space"], []
    for q in doc["questions"]:
        ranked = list(dict.fromkeys(t for h in mem.search(q["question"], space=space, top_k=k, now=q["now"])
                                    for t in h.source_turn_ids))
        out.append(next((i for i, t in enumerate(ranked, 1) if t in q["evidence"]), None))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen-0.5b", help="a known model or its alias (etamem llm models)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=None, help="write the record as JSON here")
    p.add_argument("--cache", default=None, help="an LLM reply cache file to keep between runs (default: none)")
    p.add_argument("--answer-context", default="packet", choices=("packet", "turns"),
                   help="Config.answer_context for the answers (default: packet)")
    p.add_argument("--answer-style", default="locomo", choices=("locomo", "short"),
                   help="Config.answer_style for the answers (default: locomo, the seed's prompt)")
    p.add_argument("--answer-top-k", type=int, nargs="+", default=[10],
                   help="evidence hits per answer (default 10; --answers-only takes several)")
    p.add_argument("--answers-only", action="store_true",
                   help="rule-extracted memory, the questions answered under both answer contexts")
    args = p.parse_args(argv)
    record = (answers_only(args.model, args.threads, args.cache, args.answer_style, tuple(args.answer_top_k))
              if args.answers_only else run(args.model, args.threads, args.cache, args.answer_context,
                                              args.answer_style, args.answer_top_k[0]))
    text = json.dumps(record, indent=1, default=str)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
