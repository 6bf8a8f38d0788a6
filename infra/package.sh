#!/usr/bin/env bash
# Build the Function App package (.build/weft.zip) for Linux x86-64, CPython 3.11.
# Dependencies are vendored under .python_packages/ where the Functions host looks for them,
# because the app runs from a package blob (no remote build). See docs/deploy.md, "Publish the app".
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
OUT=.build
SITE=$OUT/site

rm -rf "$OUT"
mkdir -p "$SITE"
# The app's own code: what .funcignore does not exclude.
cp -r function_app.py host.json requirements.txt shared orchestrators activities entities triggers "$SITE"/
find "$SITE" -name '__pycache__' -type d -prune -exec rm -rf {} +
"$PYTHON" -m pip install -q -r requirements.txt --target "$SITE/.python_packages/lib/site-packages" \
  --platform manylinux2014_x86_64 --implementation cp --python-version 3.11 --only-binary=:all:
(cd "$SITE" && "$PYTHON" -c "import shutil; shutil.make_archive('../weft', 'zip', '.')")
echo "$OUT/weft.zip"
