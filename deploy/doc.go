// Package deploy holds no code: its directory keeps the files an operator
// deploys beside Oncegate (Prometheus alert rules, a Grafana dashboard and
// its provisioning, the NATS and Prometheus configurations that
// docker-compose.yml mounts), and its tests check them against a running
// consumer.
package deploy
