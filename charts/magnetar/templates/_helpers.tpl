{{- define "magnetar.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "magnetar.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* selector labels of one component: (dict "ctx" $ "component" "broker") */}}
{{- define "magnetar.selector" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "magnetar.image" -}}
{{ printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end -}}

{{- define "magnetar.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ default (include "magnetar.fullname" .) .Values.serviceAccount.name }}
{{- else -}}
{{ default "default" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{- define "magnetar.dbSecretName" -}}
{{- if .Values.database.external.existingSecret -}}
{{ .Values.database.external.existingSecret }}
{{- else -}}
{{ include "magnetar.fullname" . }}-database
{{- end -}}
{{- end -}}

{{- define "magnetar.dbSecretKey" -}}
{{- if .Values.database.external.existingSecret -}}
{{ .Values.database.external.existingSecretKey }}
{{- else -}}
url
{{- end -}}
{{- end -}}

{{- define "magnetar.authSecretName" -}}
{{ default (printf "%s-auth" (include "magnetar.fullname" .)) .Values.auth.jwt.existingSecret }}
{{- end -}}

{{/* TLS (values tls): the Secret holding tls.crt, tls.key and ca.crt, where it is
     mounted, and the URL schemes the services advertise. */}}
{{- define "magnetar.tlsSecretName" -}}
{{ default (printf "%s-tls" (include "magnetar.fullname" .)) .Values.tls.existingSecret }}
{{- end -}}

{{- define "magnetar.tlsDir" -}}/etc/magnetar/tls{{- end -}}

{{- define "magnetar.httpScheme" -}}{{ if .Values.tls.enabled }}https{{ else }}http{{ end }}{{- end -}}

{{- define "magnetar.pulsarScheme" -}}{{ if .Values.tls.enabled }}pulsar+ssl{{ else }}pulsar{{ end }}{{- end -}}

{{/* The same MAGNETAR_TLS_* names `magnetar-local run --tls` sets. */}}
{{- define "magnetar.tlsEnv" -}}
{{- if .Values.tls.enabled }}
- name: MAGNETAR_TLS_ENABLED
  value: "true"
- name: MAGNETAR_TLS_CERT_FILE
  value: {{ printf "%s/tls.crt" (include "magnetar.tlsDir" .) | quote }}
- name: MAGNETAR_TLS_KEY_FILE
  value: {{ printf "%s/tls.key" (include "magnetar.tlsDir" .) | quote }}
- name: MAGNETAR_TLS_CA_FILE
  value: {{ printf "%s/ca.crt" (include "magnetar.tlsDir" .) | quote }}
- name: MAGNETAR_TLS_REQUIRE_CLIENT_CERT
  value: {{ .Values.tls.requireClientCert | quote }}
- name: MAGNETAR_TLS_RELOAD_INTERVAL_S
  value: {{ .Values.tls.reloadIntervalSeconds | quote }}
{{- end }}
{{- end -}}

{{- define "magnetar.tlsVolumeMount" -}}
{{- if .Values.tls.enabled }}
- {name: tls, mountPath: {{ include "magnetar.tlsDir" . }}, readOnly: true}
{{- end }}
{{- end -}}

{{/* A Secret volume's files change in place when the Secret does (not through
     subPath), so a renewed certificate reaches the running process. */}}
{{- define "magnetar.tlsVolume" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret: {secretName: {{ include "magnetar.tlsSecretName" . }}, defaultMode: 0440}
{{- end }}
{{- end -}}

{{/* The database connection.  The bundled PostgreSQL: a URL without the password and
     PGPASSWORD (asyncpg and libpq read it) from the chart's Secret or
     postgresql.existingSecret, so the password needs no URL escaping and never sits in a
     URL.  An external database: the URL from its Secret. */}}
{{- define "magnetar.databaseEnv" -}}
{{- if .Values.components.postgresql -}}
{{- $ssl := "" }}
{{- if and .Values.tls.enabled .Values.tls.databaseSslMode }}
{{- $ssl = printf "?sslmode=%s&sslrootcert=%s/ca.crt" .Values.tls.databaseSslMode (include "magnetar.tlsDir" .) }}
{{- end }}
- name: MAGNETAR_DATABASE_URL
  value: {{ printf "postgresql://magnetar@%s-postgresql:5432/magnetar%s" (include "magnetar.fullname" .) $ssl | quote }}
- name: PGPASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "magnetar.postgresqlSecretName" . }}
      key: {{ include "magnetar.postgresqlSecretKey" . }}
{{- else -}}
- name: MAGNETAR_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "magnetar.dbSecretName" . }}
      key: {{ include "magnetar.dbSecretKey" . }}
{{- end }}
{{- end -}}

{{- define "magnetar.postgresqlSecretName" -}}
{{ default (printf "%s-database" (include "magnetar.fullname" .)) .Values.postgresql.existingSecret }}
{{- end -}}

{{- define "magnetar.postgresqlSecretKey" -}}
{{ if .Values.postgresql.existingSecret }}{{ .Values.postgresql.existingSecretKey }}{{ else }}password{{ end }}
{{- end -}}

{{/* magnetar-migrate's environment (init containers, the hook Job). */}}
{{- define "magnetar.migrateEnv" -}}
{{ include "magnetar.databaseEnv" . }}
- name: MAGNETAR_DATABASE_WAIT_S
  value: {{ .Values.migration.waitSeconds | quote }}
{{- end -}}

{{/* Authentication settings; the same in every service and the helm test pod. */}}
{{- define "magnetar.authEnv" -}}
- name: MAGNETAR_AUTH_ENABLED
  value: {{ .Values.auth.enabled | quote }}
- name: MAGNETAR_AUTH_SUPERUSER_ROLES
  value: {{ join "," .Values.auth.superuserRoles | quote }}
{{- if .Values.auth.enabled }}
{{- if .Values.auth.jwt.publicKey }}
- name: MAGNETAR_AUTH_JWT_PUBLIC_KEY
  valueFrom:
    secretKeyRef: {name: {{ include "magnetar.authSecretName" . }}, key: jwt-public-key}
{{- else }}
- name: MAGNETAR_AUTH_JWT_SECRET
  valueFrom:
    secretKeyRef: {name: {{ include "magnetar.authSecretName" . }}, key: jwt-secret}
{{- end }}
- name: MAGNETAR_AUTH_SERVICE_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ include "magnetar.authSecretName" . }}, key: service-token, optional: true}
{{- end }}
{{- end -}}

{{/* Every broker pod's URL, comma-separated: the service URL clients inside the cluster
     are given (a lookup redirects them to a partition's owner). */}}
{{- define "magnetar.brokerUrls" -}}
{{- $full := include "magnetar.fullname" . }}
{{- $brokers := list }}
{{- range $i := until (int .Values.broker.replicaCount) }}
{{- $brokers = append $brokers (printf "%s://%s-broker-%d.%s-broker.%s.svc:8080" (include "magnetar.httpScheme" $) $full $i $full $.Release.Namespace) }}
{{- end }}
{{- join "," $brokers }}
{{- end -}}

{{/* Pod annotations: Prometheus scraping, then the component's podAnnotations. */}}
{{- define "magnetar.podAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: "8080"
{{- with .podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Where a component's pods may run: (the component's values). */}}
{{- define "magnetar.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget: (dict "ctx" $ "values" .Values.broker "component" "broker"
     "name" name "coordinators" bool).  Coordinators (and brokers hosting them) with one
     replica get minAvailable: 1, so no voluntary eviction (drain, autoscaler) leaves zero
     coordinators; a drain then waits until a second one runs or the budget is lifted
     (docs/kubernetes.md, "Upgrades and rollbacks"). */}}
{{- define "magnetar.pdb" -}}
{{- if .values.pdb.enabled }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  labels: {{- include "magnetar.labels" .ctx | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
spec:
  {{- if and .coordinators (eq (int .values.replicaCount) 1) }}
  minAvailable: 1
  {{- else }}
  maxUnavailable: {{ .values.pdb.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels: {{- include "magnetar.selector" (dict "ctx" .ctx "component" .component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/* Environment every service gets; the same variable names `magnetar-local` sets. */}}
{{- define "magnetar.env" -}}
{{ include "magnetar.databaseEnv" .ctx }}
- name: MAGNETAR_HOST
  value: "0.0.0.0"
- name: MAGNETAR_PORT
  value: "8080"
- name: MAGNETAR_LOG_FORMAT
  value: json
{{ include "magnetar.authEnv" .ctx }}
{{- include "magnetar.tlsEnv" .ctx }}
{{- range $name, $value := .values.config }}
- name: {{ printf "MAGNETAR_%s" ($name | snakecase | upper) }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* Probes: (dict "ctx" $ "probes" .values.probes).  Over HTTPS with TLS (the kubelet
     does not verify the certificate); with mutual TLS the kubelet has no client
     certificate, so the pod probes itself with its own (magnetar-probe). */}}
{{- define "magnetar.probeAction" -}}
{{- if and .ctx.Values.tls.enabled .ctx.Values.tls.requireClientCert -}}
exec: {command: [magnetar-probe, {{ .path }}]}
{{- else -}}
httpGet: {path: {{ .path }}, port: http{{ if .ctx.Values.tls.enabled }}, scheme: HTTPS{{ end }}}
{{- end -}}
{{- end -}}

{{- define "magnetar.probes" -}}
{{- $ctx := .ctx }}
{{- with .probes.startup }}{{ if .enabled }}
startupProbe:
  {{- include "magnetar.probeAction" (dict "ctx" $ctx "path" "/healthz") | nindent 2 }}
  periodSeconds: {{ .periodSeconds }}
  timeoutSeconds: {{ .timeoutSeconds }}
  failureThreshold: {{ .failureThreshold }}
{{- end }}{{ end }}
{{- with .probes.readiness }}{{ if .enabled }}
readinessProbe:
  {{- include "magnetar.probeAction" (dict "ctx" $ctx "path" "/readyz") | nindent 2 }}
  periodSeconds: {{ .periodSeconds }}
  timeoutSeconds: {{ .timeoutSeconds }}
  failureThreshold: {{ .failureThreshold }}
{{- end }}{{ end }}
{{- with .probes.liveness }}{{ if .enabled }}
livenessProbe:
  {{- include "magnetar.probeAction" (dict "ctx" $ctx "path" "/healthz") | nindent 2 }}
  periodSeconds: {{ .periodSeconds }}
  timeoutSeconds: {{ .timeoutSeconds }}
  failureThreshold: {{ .failureThreshold }}
{{- end }}{{ end }}
{{- end -}}

{{/* The pod spec shared by every service: (dict "ctx" $ "values" .Values.broker "component" "broker" "command" "magnetar-broker" "extraEnv" list) */}}
{{- define "magnetar.podSpec" -}}
serviceAccountName: {{ include "magnetar.serviceAccountName" .ctx }}
automountServiceAccountToken: false
{{- include "magnetar.scheduling" .values }}
terminationGracePeriodSeconds: {{ .values.terminationGracePeriodSeconds }}
securityContext: {{- toYaml .ctx.Values.podSecurityContext | nindent 2 }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .ctx.Values.migration.initContainers }}
initContainers:
  - name: migrate
    image: {{ include "magnetar.image" .ctx }}
    imagePullPolicy: {{ .ctx.Values.image.pullPolicy }}
    command: ["magnetar-migrate"]
    env: {{- include "magnetar.migrateEnv" .ctx | nindent 6 }}
      {{- with .values.extraEnv }}{{ toYaml . | nindent 6 }}{{ end }}
    resources: {{- toYaml .ctx.Values.migration.resources | nindent 6 }}
    securityContext: {{- toYaml .ctx.Values.securityContext | nindent 6 }}
    {{- if or .values.extraVolumeMounts .ctx.Values.tls.enabled }}
    volumeMounts:
      {{- include "magnetar.tlsVolumeMount" .ctx | nindent 6 }}
      {{- with .values.extraVolumeMounts }}{{ toYaml . | nindent 6 }}{{ end }}
    {{- end }}
{{- end }}
containers:
  - name: {{ .component }}
    image: {{ include "magnetar.image" .ctx }}
    imagePullPolicy: {{ .ctx.Values.image.pullPolicy }}
    command: [{{ .command | quote }}]
    ports:
      - {name: http, containerPort: 8080, protocol: TCP}
      {{- with .extraPorts }}{{ toYaml . | nindent 6 }}{{ end }}
    env:
      {{- with .extraEnv }}{{ toYaml . | nindent 6 }}{{ end }}
      {{- include "magnetar.env" . | nindent 6 }}
      {{- with .values.extraEnv }}{{ toYaml . | nindent 6 }}{{ end }}
    {{- include "magnetar.probes" (dict "ctx" .ctx "probes" .values.probes) | nindent 4 }}
    {{- with .values.preStopSleepSeconds }}
    lifecycle:
      preStop:
        exec:
          command: ["sleep", {{ . | quote }}]
    {{- end }}
    resources: {{- toYaml .values.resources | nindent 6 }}
    securityContext: {{- toYaml .ctx.Values.securityContext | nindent 6 }}
    volumeMounts:
      - {name: tmp, mountPath: /tmp}
      {{- include "magnetar.tlsVolumeMount" .ctx | nindent 6 }}
      {{- with .values.extraVolumeMounts }}{{ toYaml . | nindent 6 }}{{ end }}
volumes:
  - name: tmp
    emptyDir: {}
  {{- include "magnetar.tlsVolume" .ctx | nindent 2 }}
  {{- with .values.extraVolumes }}{{ toYaml . | nindent 2 }}{{ end }}
{{- end -}}

{{/* A Spark job's pod: (dict "ctx" $ "spark" .Values.sparkJobs "args" list "claim" name "brokers" urls "adminUrl" url "labels" dict) */}}
{{- define "magnetar.sparkPod" -}}
metadata:
  labels: {{- toYaml .labels | nindent 4 }}
spec:
  restartPolicy: OnFailure
  serviceAccountName: {{ include "magnetar.serviceAccountName" .ctx }}
  automountServiceAccountToken: false
  securityContext: {{- toYaml .ctx.Values.podSecurityContext | nindent 4 }}
  {{- with .ctx.Values.imagePullSecrets }}
  imagePullSecrets: {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: spark
      image: {{ printf "%s:%s" .spark.image.repository (default .ctx.Chart.AppVersion .spark.image.tag) }}
      imagePullPolicy: {{ .spark.image.pullPolicy }}
      command: ["spark-submit"]
      args: {{- toYaml .args | nindent 8 }}
      env:
        # The jobs' --service-url, --admin-url and --auth-token defaults (spark-jobs/jobcommon.py).
        - name: MAGNETAR_SERVICE_URL
          value: {{ .brokers | quote }}
        - name: MAGNETAR_ADMIN_URL
          value: {{ .adminUrl | quote }}
        {{- with .spark.authTokenSecret.name }}
        - name: MAGNETAR_AUTH_TOKEN
          valueFrom:
            secretKeyRef: {name: {{ . }}, key: {{ $.spark.authTokenSecret.key }}}
        {{- end }}
        {{- if .ctx.Values.tls.enabled }}
        # The jobs' --tls-* defaults (spark-jobs/jobcommon.py): the release's CA and, under
        # mutual TLS, its certificate.
        - name: MAGNETAR_TLS_TRUST_CERT_PATH
          value: {{ printf "%s/ca.crt" (include "magnetar.tlsDir" .ctx) | quote }}
        {{- if .ctx.Values.tls.requireClientCert }}
        - name: MAGNETAR_TLS_CERT_FILE
          value: {{ printf "%s/tls.crt" (include "magnetar.tlsDir" .ctx) | quote }}
        - name: MAGNETAR_TLS_KEY_FILE
          value: {{ printf "%s/tls.key" (include "magnetar.tlsDir" .ctx) | quote }}
        {{- end }}
        {{- end }}
        # The root file system is read-only: Spark's scratch space and the JVM's files go to /tmp.
        - name: HOME
          value: /tmp
        - name: SPARK_LOCAL_DIRS
          value: /tmp
      resources: {{- toYaml .spark.resources | nindent 8 }}
      securityContext: {{- toYaml .ctx.Values.securityContext | nindent 8 }}
      volumeMounts:
        - {name: tmp, mountPath: /tmp}
        - {name: data, mountPath: /data}
        {{- include "magnetar.tlsVolumeMount" .ctx | nindent 8 }}
  volumes:
    - name: tmp
      emptyDir: {}
    {{- include "magnetar.tlsVolume" .ctx | nindent 4 }}
    - name: data
      persistentVolumeClaim:
        claimName: {{ .claim }}
{{- end -}}
