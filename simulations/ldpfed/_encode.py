"""The child interpreter of :func:`ldpfed.simulate` that fills the encoding cache with a run's data.

``python -m ldpfed._encode CONFIG ANSWER PROGRESS``: reads the run config (JSON), encodes, and
writes ``{"warnings": [...]}`` or, for bad input, ``{"error": "..."}`` to ANSWER.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ldpfed.fed.configuration.run_spec import RunSpec


def encode_run_data(config: RunSpec, progress: bool) -> list[str]:
    """Fill the encoding cache with the run's public data and both splits; check the public data
    against the task (labels; the domain too, unless the encoder is the BiLSTM the server trains on the
    public data inside the run)."""
    from ldpfed.fed.runtime.assets import check_public, default_cache_dir, load_public
    from ldpfed.fed.encoders.cache import encode_cached
    from ldpfed.fed.encoders.factory import make_encoder
    from ldpfed.fed.encoders.tuned import TUNED_SPEC
    from ldpfed.fed.heterogeneity.registry import encoding_groups
    from ldpfed.fed.configuration.plan import encoder_spec
    from ldpfed.fed.data.population import Population

    population = Population.build(config.data, config.seed, default_cache_dir(config))
    public = load_public(config)
    if config.encoder.encoder in ("bilstm", TUNED_SPEC):  # trained on the public data inside the run
        return list(check_public(config, public, population.train.label_names).warnings)
    encoder = make_encoder(config.encoder.encoder)
    if config.encoder.dim > encoder.dim:  # fail now, not at the projection's fit inside the run
        raise ValueError(f"--dim {config.encoder.dim} exceeds the encoder's {encoder.dim} dimensions ({config.encoder.encoder})")
    cache = default_cache_dir(config)
    splits = {"train": population.train, "dev": population.dev}
    train = encode_cached(encoder, population.train, cache, progress=progress, label="train")
    encode_cached(encoder, population.dev, cache, progress=progress, label="dev")
    records = encoder_spec(config)
    if records != config.encoder.encoder:  # the mechanism releases another encoding of the records (snd: word-embedding rows)
        for name, split in splits.items():
            encode_cached(make_encoder(records), split, cache, progress=progress, label=name)
    for encoding, _ in encoding_groups(config):  # each device group's encoder setting, which its users' nodes read
        if encoding:
            truncated = encoder.truncated(encoding["max_tokens"])
            for name, split in splits.items():
                encode_cached(truncated, split, cache, progress=progress, label=name)
    public_x = None if public is None else encode_cached(encoder, public, cache, progress=progress, label="public")
    return list(check_public(config, public, population.train.label_names, public_x, train).warnings)


def main(argv: list[str]) -> int:
    """Encode the run of config file ``argv[0]``; the answer goes to file ``argv[1]``."""
    request, answer, progress = argv
    config = RunSpec.from_mapping(json.loads(Path(request).read_text()))
    try:
        result = {"warnings": encode_run_data(config, progress == "1")}
    except ValueError as error:
        result = {"error": str(error)}
    Path(answer).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
