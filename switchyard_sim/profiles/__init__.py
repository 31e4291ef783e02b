"""Hardware profiles for `switchyard bench simulate` (JSON) and the scripts that build them."""
