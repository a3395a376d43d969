#!/usr/bin/env bash
# Regenerates trait/standard.txt, the standard trait names, from Debian's
# python3-os-traits (the list Ironic 21.4 and Placement 8.0 validate against).
set -euo pipefail
cd "$(dirname "$0")/.."
/usr/bin/python3 -c 'import os_traits; print("\n".join(sorted(os_traits.get_traits())))' > trait/standard.txt
echo "trait/standard.txt: $(wc -l < trait/standard.txt) traits"
