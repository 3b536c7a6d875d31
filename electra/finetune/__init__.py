"""The fine-tuning floor: what every fine-tuning command shares, below the consumers that use it.

- `recipe`: the paper's optimizer settings declared once, rates by model size, seeds, the engine's arguments;
- `models`: the checkpoint a command starts from, and its bare encoder;
- `seeds`: the seed loop (best seed kept, median over seeds);
- `results`: each seed's result file and strict JSON;
- `text_tasks`: sentence and sentence-pair classification files (GLUE's TSV layout) and their strict reader.

GLUE (single- and multi-task), `electra tag`, SQuAD and the probes are a task and a head on this floor; the
training loop itself is the one engine (`electra.training.engine`).
"""
