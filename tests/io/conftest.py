"""Worker processes unpickle the test datasets by module name: make their module
(``loader_datasets``, next to this file) importable in every process."""
import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
