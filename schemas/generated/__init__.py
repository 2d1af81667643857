"""Code generated from the schemas in schemas/ by schemas/regenerate.sh; never edited by hand."""
