{{/* The release's name for its objects: RELEASE, or RELEASE-ortserve when the release's name lacks the chart's. */}}
{{- define "ortserve.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ortserve.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ortserve.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "ortserve.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The chart's own checks, each one line saying what is wrong and what to do. Included by every template that depends on them. */}}
{{- define "ortserve.validate" -}}
{{- range $key := list "listen" "models" "model" "ort_lib" "shutdown_grace" "shutdown_drain_delay" -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "config.%s is set by the chart: use %s instead" $key (get (dict "listen" "containerPort" "models" "models.source" "model" "models.source" "ort_lib" "the image" "shutdown_grace" "shutdown.terminationGracePeriodSeconds" "shutdown_drain_delay" "shutdown.drainDelaySeconds") $key)) -}}
{{- end -}}
{{- end -}}
{{- $s := .Values.shutdown -}}
{{- if lt (int $s.terminationGracePeriodSeconds) 2 -}}
{{- fail (printf "shutdown.terminationGracePeriodSeconds %v: want at least 2 (serve's grace is a second under it)" $s.terminationGracePeriodSeconds) -}}
{{- end -}}
{{- if ge (int $s.drainDelaySeconds) (sub (int $s.terminationGracePeriodSeconds) 1 | int) -}}
{{- fail (printf "shutdown.drainDelaySeconds %v must be under the grace, terminationGracePeriodSeconds - 1 = %v: raise terminationGracePeriodSeconds" $s.drainDelaySeconds (sub (int $s.terminationGracePeriodSeconds) 1)) -}}
{{- end -}}
{{- $r := .Values.probes.readiness -}}
{{- $notReady := mul (int $r.periodSeconds) (int $r.failureThreshold) -}}
{{- if le (int $s.drainDelaySeconds) (int $notReady) -}}
{{- fail (printf "shutdown.drainDelaySeconds %v must be longer than probes.readiness periodSeconds × failureThreshold = %v, or the pod stops accepting before it leaves the endpoints" $s.drainDelaySeconds $notReady) -}}
{{- end -}}
{{- if not (has .Values.autoscaling.metric (list "inflight" "queue")) -}}
{{- fail (printf "autoscaling.metric %q: use inflight or queue" .Values.autoscaling.metric) -}}
{{- end -}}
{{- if gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas) -}}
{{- fail (printf "autoscaling.minReplicas %v is over maxReplicas %v" .Values.autoscaling.minReplicas .Values.autoscaling.maxReplicas) -}}
{{- end -}}
{{- $m := .Values.models -}}
{{- if not (has $m.source (list "baked" "pvc" "image" "download")) -}}
{{- fail (printf "models.source %q: use baked, pvc, image or download" $m.source) -}}
{{- end -}}
{{- if and (eq $m.source "pvc") (not $m.pvc.claimName) -}}
{{- fail "models.source pvc needs models.pvc.claimName: the PersistentVolumeClaim holding the model repository" -}}
{{- end -}}
{{- if and (eq $m.source "image") (not $m.image.repository) -}}
{{- fail "models.source image needs models.image.repository: an image with the model repository at models.image.path" -}}
{{- end -}}
{{- if and (eq $m.source "download") (or (not $m.download.image) (not $m.download.command)) -}}
{{- fail "models.source download needs models.download.image and models.download.command, which fill /models" -}}
{{- end -}}
{{- if and .Values.canary.enabled (not .Values.canary.image.tag) -}}
{{- fail "canary.enabled needs canary.image.tag: the build under trial" -}}
{{- end -}}
{{- end -}}

{{/* serve's config file for a track: (dict "root" $ "extra" overrides). */}}
{{- define "ortserve.serveConfig" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
{{- $defaults := dict "device" (ternary "cuda" "cpu" $v.gpu.enabled) -}}
{{- $forced := dict
      "models" "/models"
      "shutdown_grace" (printf "%ds" (sub (int $v.shutdown.terminationGracePeriodSeconds) 1))
      "shutdown_drain_delay" (printf "%ds" (int $v.shutdown.drainDelaySeconds)) -}}
{{- if $v.auth.existingSecret -}}
{{- $_ := set $forced "auth" (dict "api_key_file" "/etc/ortserve/auth/api-keys" "exempt" "health,metrics") -}}
{{- end -}}
{{- $c := mustMergeOverwrite $defaults (deepCopy $v.config) (deepCopy (.extra | default dict)) $forced -}}
{{- toYaml $c -}}
{{- end -}}

{{/* The image of a track: (dict "root" $ "canary" bool). */}}
{{- define "ortserve.image" -}}
{{- $v := .root.Values -}}
{{- $repo := $v.image.repository -}}
{{- $tag := $v.image.tag | default .root.Chart.AppVersion -}}
{{- if $v.gpu.enabled -}}
{{- $repo = $v.gpu.image.repository | default $repo -}}
{{- $tag = $v.gpu.image.tag | default (printf "%s-cuda" .root.Chart.AppVersion) -}}
{{- end -}}
{{- if .canary -}}
{{- $repo = $v.canary.image.repository | default $repo -}}
{{- $tag = $v.canary.image.tag -}}
{{- end -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}

{{/* The PromQL series selector of the stable Deployment's pods: Deployment pods are named DEPLOYMENT-HASH-SUFFIX, so the canary's (DEPLOYMENT-canary-...) are left out. */}}
{{- define "ortserve.podSelector" -}}
{{- printf "namespace=%q,pod=~%q" .Release.Namespace (printf "%s-[a-z0-9]+-[a-z0-9]+" (include "ortserve.fullname" .)) -}}
{{- end -}}

{{/* The HPA's and KEDA's scaling behaviour. */}}
{{- define "ortserve.behavior" -}}
scaleUp:
  stabilizationWindowSeconds: {{ int .Values.autoscaling.scaleUpStabilizationSeconds }}
  selectPolicy: Max
  policies:
    - type: Percent
      value: 100
      periodSeconds: 15
    - type: Pods
      value: 4
      periodSeconds: 15
scaleDown:
  stabilizationWindowSeconds: {{ int .Values.autoscaling.scaleDownStabilizationSeconds }}
  selectPolicy: Max
  policies:
    - type: Percent
      value: 50
      periodSeconds: 60
{{- end -}}
