#!/usr/bin/env bash
# The machine's RabbitMQ for `make demo`, `make test` and CI: installs Debian's rabbitmq-server when no broker
# answers and the package is missing, and (`start`) starts it detached when nothing answers on 127.0.0.1:5672.
#   tools/broker.sh install   the package only (the tests start a throwaway broker from it when none runs)
#   tools/broker.sh start     the package, then the machine's broker (the demo and CI use the running one)
# Nothing happens when SAFEBUNNY_TEST_AMQP_URI / SAFEBUNNY_DEMO_URI name another broker or one already answers.
set -euo pipefail
what="${1:-install}"
answers() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }

if [ -n "${SAFEBUNNY_TEST_AMQP_URI:-}${SAFEBUNNY_DEMO_URI:-}" ] || answers; then
  exit 0
fi
if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
  if [ "$(id -u)" = 0 ]; then as_root=(); elif sudo -n true 2>/dev/null; then as_root=(sudo -n); else
    echo "broker: no RabbitMQ answers on 127.0.0.1:5672 and Debian's rabbitmq-server is not installed;" \
         "install it (apt-get install rabbitmq-server) or set SAFEBUNNY_TEST_AMQP_URI / SAFEBUNNY_DEMO_URI" >&2
    exit 1
  fi
  echo "broker: installing Debian's rabbitmq-server (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  "${as_root[@]}" apt-get update -q >/dev/null
  "${as_root[@]}" apt-get install -y -q rabbitmq-server >/dev/null
fi
if [ "$what" = start ]; then
  echo "broker: nothing answers on 127.0.0.1:5672, starting rabbitmq-server -detached"
  rabbitmq-server -detached || true
  for _ in $(seq 1 90); do answers && break; sleep 1; done
  rabbitmqctl await_startup >/dev/null 2>&1 || true
  answers || { echo "broker: rabbitmq-server did not answer within 90 s (see /var/log/rabbitmq)" >&2; exit 1; }
fi
