# Sourced by the launch scripts: `hydra_quote VALUE` prints VALUE as one quoted Hydra string, so a path with
# spaces, commas, quotes or non-ASCII letters reaches the config as written (an unquoted comma makes Hydra read a
# sweep of several runs). The same rules as train_embodied.config.override_syntax.hydra_quoted.
hydra_quote() {
    local v="$1"
    if [[ "$v" != *"'"* ]]; then
        printf "'%s'" "$v"
    elif [[ "$v" != *'"'* ]]; then
        printf '"%s"' "$v"
    else
        v="${v//\\/\\\\}"
        printf "'%s'" "${v//\'/\\\'}"
    fi
}
