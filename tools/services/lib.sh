# Sourced by the service scripts: finding loopback ports, and stopping a
# server. Each script defines die() before sourcing this, and, to stop with
# stop_with, running(), pid_of() and server_name.
#
# Every default port, and every port the tests choose for a private server,
# lies below 32768, where Linux's ephemeral range begins: a server the tests
# stop and start again must bind the same port, and a client's outgoing
# connection that happened to get that port as its local one would make the
# restart fail with "address in use" (a connect probe cannot see it).

port_in_use() {
    # bash's /dev/tcp connects: success means something listens there.
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The first port from $1 on that nothing listens on and that is not $2.
free_port() {
    local p=$1 tries=0
    while port_in_use "$p" || [ "$p" = "${2:-}" ]; do
        p=$((p + 1))
        tries=$((tries + 1))
        [ $tries -lt 100 ] || die "no free port from $1 on"
    done
    echo "$p"
}

# service_ports DIR FIRST MAIN_FILE OTHER_FILE: a server's two ports, kept in
# DIR/MAIN_FILE and DIR/OTHER_FILE. A server that ran in DIR before gets its
# own again (clients reconnect to the same address), and fails if another
# process took one; a new one takes the first free ports from FIRST on.
# Sets main_port and other_port.
service_ports() {
    local d=$1 first=$2 main_file=$3 other_file=$4
    if [ -f "$d/$main_file" ] && [ -f "$d/$other_file" ]; then
        main_port=$(cat "$d/$main_file")
        other_port=$(cat "$d/$other_file")
        ! port_in_use "$main_port" || die "port $main_port of the server in $d is taken by another process"
        ! port_in_use "$other_port" || die "port $other_port of the server in $d is taken by another process"
    else
        main_port=$(free_port "$first")
        other_port=$(free_port $((main_port + 1)) "$main_port")
        echo "$main_port" >"$d/$main_file"
        echo "$other_port" >"$d/$other_file"
    fi
}

# stop_with SIGNAL: signal the script's server (pid_of) and wait until it is
# gone; nothing to do when it does not run.
stop_with() {
    running || return 0
    local pid i
    pid=$(pid_of)
    kill "-$1" "$pid" 2>/dev/null || true
    for i in $(seq 1 300); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    die "$server_name $pid did not exit within 30 s of SIG$1"
}

built_server_usage() {
    echo "usage: $0 start|env|stop|kill|status DIR, or $0 build" >&2
    exit 2
}

# built_server_args ARGS...: cmd and dir of a script whose server is built
# from source (FerretDB, toxiproxy, Jaeger): "build", or a command and DIR.
built_server_args() {
    { [ $# -eq 2 ] && [ "$1" != build ]; } || { [ $# -eq 1 ] && [ "$1" = build ]; } ||
        built_server_usage
    cmd=$1
    dir=${2:-}
}

# built_server_main CMD: the commands of such a script, with its build,
# start, running and print_env: build (prints the binary), start (builds
# first), env, stop, kill, status.
built_server_main() {
    case $1 in
    build)
        build
        echo "$bin"
        ;;
    start)
        build
        start
        ;;
    env)
        running || die "no server running in $dir"
        dir=$(cd "$dir" && pwd)
        print_env
        ;;
    stop) stop_with TERM ;;
    kill) stop_with KILL ;;
    status) running ;;
    *) built_server_usage ;;
    esac
}
