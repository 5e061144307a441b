"""The models: text encoders, the affect tagger, the LLM client and its prompt files, and the
cache scope their caches are keyed by. Heavy dependencies are imported when first used."""
