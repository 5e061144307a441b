"""Turns into atomic memory units: the rule and LLM extractors (`extractors`), the person
rewrite, relative dates made absolute, and the word stems both methods share (`stems`)."""
