"""Test-suite settings shared by every test module."""
import os

from hypothesis import settings

# CI runs the property tests on a fixed example sequence, so a submission's result does
# not depend on which random examples a run happens to draw; developers' runs explore.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")
