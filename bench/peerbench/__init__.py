"""
The peer benchmark's parts: scenarios, shared work, contestants, verification and measurements.

``bench/peers.py`` (per-run cost, memory, serialization, import, threads)
and ``bench/concurrency.py`` (many runs at once on asyncio) are the entry
points; this package holds what they share, one module per concept.
"""
