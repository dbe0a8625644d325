"""Engine adapters: load an inference engine's own cache planner and check the plans it makes.

Each engine lives in a subpackage (kvproof.engines.<engine>) that knows how to import the
engine's planner without its GPU stack, which points of a recipe's domain to plan, and how to
translate the engine's plan into the plan document that kvproof.spec checks. What a verdict is,
how a plan is checked for every parent count, and the baseline are shared by every engine.
"""
