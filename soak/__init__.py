"""The random-kill soak: workflows SIGKILLed at random moments and resumed, then checked against the promises.

Run it with `make soak N=100 STORES=sqlite,jsonl,postgresql` (or `python -m soak --help`); docs/reliability.md
defines every check.
"""
