{{/* The chart's name, or nameOverride. */}}
{{- define "oncegate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's resource name: fullnameOverride, or release-chart. */}}
{{- define "oncegate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "oncegate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "oncegate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "oncegate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "oncegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: consumer
{{- end }}

{{- define "oncegate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "oncegate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The NATS URL the consumers join: nats.url, or the bundled NATS chart's service. */}}
{{- define "oncegate.natsURL" -}}
{{- if .Values.nats.url }}
{{- .Values.nats.url }}
{{- else if .Values.nats.enabled }}
{{- printf "nats://%s-nats:4222" .Release.Name }}
{{- end }}
{{- end }}

{{/* Where the pod mounts what. */}}
{{- define "oncegate.dataDir" -}}/var/lib/oncegate{{- end }}
{{- define "oncegate.configDir" -}}/etc/oncegate{{- end }}
{{- define "oncegate.secretsDir" -}}/etc/oncegate/secrets{{- end }}

{{/*
The checks values.schema.json cannot make across values. Each fails the
render with the reason.
*/}}
{{- define "oncegate.validate" -}}
{{- if and (eq .Values.ledger.store "badger") (ne (int .Values.replicas) 1) }}
{{- fail (printf "ledger.store badger takes replicas: 1, not %d: one process owns a Badger ledger's directory. To run several consumers, set ledger.store: kv (the JetStream KV ledger; see values-kv.yaml)" (int .Values.replicas)) }}
{{- end }}
{{- if not (include "oncegate.natsURL" .) }}
{{- fail "nats.url is required (the NATS deployment the consumers join), unless nats.enabled installs the NATS chart" }}
{{- end }}
{{- if le (int .Values.terminationGracePeriodSeconds) (add (int .Values.drainTimeoutSeconds) 10 | int) }}
{{- fail (printf "terminationGracePeriodSeconds %d must exceed drainTimeoutSeconds %d by more than 10s, or the kubelet kills a draining consumer" (int .Values.terminationGracePeriodSeconds) (int .Values.drainTimeoutSeconds)) }}
{{- end }}
{{- end }}

{{/*
The consumer's configuration: .Values.config with what the chart decides
set over it.
*/}}
{{- define "oncegate.config" -}}
{{- $c := deepCopy (.Values.config | default dict) }}
{{- $_ := set $c "data_dir" (include "oncegate.dataDir" .) }}
{{- $nats := deepCopy (get $c "nats" | default dict) }}
{{- $_ := set $nats "url" (include "oncegate.natsURL" .) }}
{{- if .Values.nats.credsSecret }}
{{- $_ := set $nats "creds_file" (printf "%s/nats/nats.creds" (include "oncegate.secretsDir" .)) }}
{{- end }}
{{- $_ := set $c "nats" $nats }}
{{- $ledger := deepCopy (get $c "ledger" | default dict) }}
{{- $_ := set $ledger "store" .Values.ledger.store }}
{{- $_ := set $c "ledger" $ledger }}
{{- $metrics := deepCopy (get $c "metrics" | default dict) }}
{{- $_ := set $metrics "listen" (printf "0.0.0.0:%d" (int .Values.metrics.port)) }}
{{- $_ := set $c "metrics" $metrics }}
{{- if .Values.ingress.enabled }}
{{- $in := deepCopy (get $c "ingress" | default dict) }}
{{- $_ := set $in "listen" (printf "0.0.0.0:%d" (int .Values.ingress.port)) }}
{{- $sources := list }}
{{- range $s := (get $in "sources" | default list) }}
{{- $s = deepCopy $s }}
{{- if and (not (get $s "secret_env")) (not (get $s "secret_file")) (ne (get $s "auth" | toString) "none") }}
{{- $_ := set $s "secret_file" (printf "%s/webhooks/%s" (include "oncegate.secretsDir" $) (get $s "name")) }}
{{- end }}
{{- $sources = append $sources $s }}
{{- end }}
{{- if $sources }}
{{- $_ := set $in "sources" $sources }}
{{- end }}
{{- $_ := set $c "ingress" $in }}
{{- end }}
{{- if .Values.secrets.encryptionKey }}
{{- $enc := deepCopy (get $c "encryption" | default dict) }}
{{- $_ := set $enc "key_file" (printf "%s/encryption/key" (include "oncegate.secretsDir" .)) }}
{{- $_ := set $c "encryption" $enc }}
{{- end }}
{{- toYaml $c }}
{{- end }}

{{/* The pod template of the Deployment or the StatefulSet. */}}
{{- define "oncegate.podTemplate" -}}
metadata:
  labels:
    {{- include "oncegate.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # A changed configuration rolls the pods.
    checksum/config: {{ include "oncegate.config" . | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "oncegate.serviceAccountName" . }}
  automountServiceAccountToken: false
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  terminationGracePeriodSeconds: {{ int .Values.terminationGracePeriodSeconds }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    fsGroup: 10001
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: consumer
      image: "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}"
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args: ["run", "-require-nats-url", "-config", "{{ include "oncegate.configDir" . }}/oncegate.yaml"]
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        runAsNonRoot: true
        capabilities:
          drop: ["ALL"]
      ports:
        - name: metrics
          containerPort: {{ int .Values.metrics.port }}
          protocol: TCP
        {{- if .Values.ingress.enabled }}
        - name: webhooks
          containerPort: {{ int .Values.ingress.port }}
          protocol: TCP
        {{- end }}
      env:
        {{- if .Values.secrets.llmAPIKey.secret }}
        - name: {{ dig "llm" "api_key_env" "OPENAI_API_KEY" (.Values.config | default dict) }}
          valueFrom:
            secretKeyRef:
              name: {{ .Values.secrets.llmAPIKey.secret }}
              key: {{ .Values.secrets.llmAPIKey.key }}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      startupProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: {{ .Values.probes.startup.periodSeconds }}
        failureThreshold: {{ .Values.probes.startup.failureThreshold }}
      livenessProbe:
        httpGet:
          path: /healthz
          port: metrics
        periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
        failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
      readinessProbe:
        httpGet:
          path: /readyz
          port: metrics
        periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
        failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
      {{- with .Values.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        - name: config
          mountPath: {{ include "oncegate.configDir" . }}/oncegate.yaml
          subPath: oncegate.yaml
          readOnly: true
        - name: data
          mountPath: {{ include "oncegate.dataDir" . }}
        - name: tmp
          mountPath: /tmp
        {{- if .Values.nats.credsSecret }}
        - name: nats-creds
          mountPath: {{ include "oncegate.secretsDir" . }}/nats
          readOnly: true
        {{- end }}
        {{- if .Values.secrets.webhooks }}
        - name: webhook-secrets
          mountPath: {{ include "oncegate.secretsDir" . }}/webhooks
          readOnly: true
        {{- end }}
        {{- if .Values.secrets.encryptionKey }}
        - name: encryption-key
          mountPath: {{ include "oncegate.secretsDir" . }}/encryption
          readOnly: true
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ include "oncegate.fullname" . }}
    - name: tmp
      emptyDir: {}
    {{- if ne .Values.ledger.store "badger" }}
    # The ledger and the cache are in JetStream KV: the data directory
    # holds nothing that must outlive the pod.
    - name: data
      emptyDir: {}
    {{- end }}
    {{- if .Values.nats.credsSecret }}
    - name: nats-creds
      secret:
        secretName: {{ .Values.nats.credsSecret }}
        defaultMode: 0440
        items:
          - key: nats.creds
            path: nats.creds
    {{- end }}
    {{- if .Values.secrets.webhooks }}
    - name: webhook-secrets
      secret:
        secretName: {{ .Values.secrets.webhooks }}
        defaultMode: 0440
    {{- end }}
    {{- if .Values.secrets.encryptionKey }}
    - name: encryption-key
      secret:
        secretName: {{ .Values.secrets.encryptionKey }}
        defaultMode: 0440
        items:
          - key: key
            path: key
    {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.topologySpreadConstraints }}
  topologySpreadConstraints:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
