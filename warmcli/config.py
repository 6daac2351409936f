"""Every `WARM_*` setting, read from the environment in this one place.

Each setting is a function read at call time (a test or a launcher may set the
variable after import), taking the environment to read as an argument where a
caller has its own. This module owns no state and never writes the environment.
"""

from __future__ import annotations
