{{- define "infergate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "infergate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "infergate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "infergate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "infergate.labels" -}}
{{ include "infergate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "infergate.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "infergate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "infergate.fullname" .) }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}

{{/* The Redis address the caps are shared through, or "". */}}
{{- define "infergate.redisAddr" -}}
{{- if .Values.redis.externalAddr -}}
{{ .Values.redis.externalAddr }}
{{- else if .Values.redis.enabled -}}
{{ include "infergate.fullname" . }}-redis:6379
{{- end -}}
{{- end -}}

{{/* Seconds of a Go duration the schema admits (e.g. 2s, 1m30s, 500ms), rounded up. */}}
{{- define "infergate.seconds" -}}
{{- $d := . | toString -}}
{{- $total := 0.0 -}}
{{- range $m := regexFindAll "[0-9]+(\\.[0-9]+)?(ms|h|m|s)" $d -1 -}}
{{- $n := regexFind "^[0-9]+(\\.[0-9]+)?" $m | float64 -}}
{{- $u := trimPrefix (regexFind "^[0-9]+(\\.[0-9]+)?" $m) $m -}}
{{- if eq $u "h" }}{{ $total = addf $total (mulf $n 3600) }}{{ end -}}
{{- if eq $u "m" }}{{ $total = addf $total (mulf $n 60) }}{{ end -}}
{{- if eq $u "s" }}{{ $total = addf $total $n }}{{ end -}}
{{- if eq $u "ms" }}{{ $total = addf $total (divf $n 1000) }}{{ end -}}
{{- end -}}
{{- ceil $total | int -}}
{{- end -}}

{{/* The config file: the user's, with what the chart owns set over it. */}}
{{- define "infergate.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if not (get $cfg "pools") -}}
{{- $_ := set $cfg "pools" (dict "default" (dict "backends" (list (dict "url" .Values.upstream)) "health" (dict "path" "/health"))) -}}
{{- $_ := set $cfg "default_pool" "default" -}}
{{- end -}}
{{- $server := dict "listen" (printf ":%d" (int .Values.service.port)) "admin_listen" (printf ":%d" (int .Values.service.adminPort)) "admin_auth_file" "/etc/infergate/admin/admin-key" "drain_delay" .Values.drain.delay "drain_timeout" .Values.drain.timeout -}}
{{- $_ := set $cfg "server" (mergeOverwrite (get $cfg "server" | default dict) $server) -}}
{{- $addr := include "infergate.redisAddr" . -}}
{{- if $addr -}}
{{- $redis := dict "addr" $addr "lease_ttl" .Values.redis.leaseTTL "on_failure" .Values.redis.onFailure "expected_replicas" (int (ternary .Values.autoscaling.minReplicas .Values.replicaCount .Values.autoscaling.enabled)) -}}
{{- if .Values.redis.passwordSecret -}}
{{- $_ := set $redis "password_env" "REDIS_PASSWORD" -}}
{{- end -}}
{{- $shaping := get $cfg "shaping" | default dict -}}
{{- $_ := set $shaping "redis" (mergeOverwrite (get $shaping "redis" | default dict) $redis) -}}
{{- $_ := set $cfg "shaping" $shaping -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{- define "infergate.authSecret" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" (include "infergate.fullname" .)) -}}
{{- end -}}

{{- define "infergate.hasAuth" -}}
{{- if or .Values.auth.keys .Values.auth.existingSecret }}true{{ end -}}
{{- end -}}

{{/* The Secret holding the admin key under "admin-key". */}}
{{- define "infergate.adminSecret" -}}
{{- .Values.adminAuth.existingSecret | default (printf "%s-admin" (include "infergate.fullname" .)) -}}
{{- end -}}
