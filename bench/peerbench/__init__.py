"""
The peer benchmark's parts: scenarios, shared work, contestants, verification and measurements.

``bench/peers.py`` (per-run cost, memory, serialization, import, threads),
``bench/concurrent_runs.py`` (many runs at once on asyncio) and
``bench/report.py`` (the README's figures in one table) are the entry
points; this package holds what they share, one module per concept.
"""
