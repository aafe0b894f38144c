"""
Users' own worlds, each with a gate carrying one seeded bug: the kit must find every one at its default settings.

Each world module gives ``make_world`` (a fresh registry and effect log),
``buggy_gate`` (the gate as shipped, with the bug), ``sound_gate`` (the same
policy written right) and ``forbidden`` (the policy as a predicate: a call it
marks must never cross the effect boundary without a human).
"""
