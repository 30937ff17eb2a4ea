"""The words a PoolRun reports with: condition types, reasons and Event reasons.

One CamelCase word per idea, shared by the engine, its status and its Events, so users can match
on them (``kubectl wait --for=condition=Complete``, ``kubectl get events --field-selector``).
"""

from __future__ import annotations

# Condition types.
COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"

# Results.
DRAINED = "Drained"
DEADLOCKED = "Deadlocked"

# Event reasons (Drained, Deadlocked and Suspended double as Event reasons).
STARTED = "Started"
RESUMED = "Resumed"
ITEM_FAILED = "ItemFailed"

# Why one item failed, beside the agent's own reasons.
DUPLICATE_ID = "DuplicateId"
MISSING_ID = "MissingId"
NO_ROUTE = "NoRoute"
CALL_FAILED = "CallFailed"
OUTPUT_TOO_LARGE = "OutputTooLarge"

# Why a whole run failed.
ITEMS_FAILED = "ItemsFailed"
SOURCE_FAILED = "SourceFailed"
