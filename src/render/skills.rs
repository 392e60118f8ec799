//! `spec.skills`: skill directories fetched into `/skills` by an init container before the
//! agent starts (git repositories and OCI images), as kagent fetches them.
//!
//! The fetch script is fixed; every URL, ref, path and image reaches it as a separate
//! argument, never spliced into shell text.

use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvVar, SecretVolumeSource, SecurityContext, Volume,
    VolumeMount,
};

use crate::api::agent::{GitSkill, Skills};
use crate::{Error, Result};

/// Where skills are mounted in the agent container (and `KAGENT_SKILLS_FOLDER`).
pub const SKILLS_DIR: &str = "/skills";
/// Default image of the init container that fetches skills (kagent's, with git and krane).
pub const DEFAULT_SKILLS_INIT_IMAGE: &str = "cr.kagent.dev/kagent-dev/kagent/skills-init:0.7.4";
/// Name of the shared skills volume.
const SKILLS_VOLUME: &str = "kagent-skills";
/// Name of the git credentials volume.
const GIT_AUTH_VOLUME: &str = "git-auth";
/// Where git credentials are mounted in the init container.
const GIT_AUTH_DIR: &str = "/git-auth";

/// The fetch script: arguments are `git URL REF DEST SUBPATH` and `oci IMAGE DEST` groups.
const SCRIPT: &str = r#"set -eu
auth=/git-auth
if [ -f "$auth/ssh-privatekey" ]; then
  mkdir -p "$HOME/.ssh"
  cp "$auth/ssh-privatekey" "$HOME/.ssh/skills_key"
  chmod 600 "$HOME/.ssh/skills_key"
  export GIT_SSH_COMMAND="ssh -i $HOME/.ssh/skills_key -o StrictHostKeyChecking=accept-new"
elif [ -f "$auth/token" ]; then
  git config --global credential.helper '!f() { echo username=x-access-token; printf "password=%s\n" "$(cat /git-auth/token)"; }; f'
fi
while [ "$#" -gt 0 ]; do
  case "$1" in
    git)
      url=$2; ref=$3; dest=$4; sub=$5; shift 5
      echo "skills: git $url ($ref) -> $dest"
      if printf '%s' "$ref" | grep -Eq '^[0-9a-fA-F]{40}$'; then
        git clone -- "$url" "$dest"
        git -C "$dest" checkout "$ref"
      else
        git clone --depth 1 --branch "$ref" -- "$url" "$dest"
      fi
      if [ -n "$sub" ]; then
        tmp=$(mktemp -d)
        cp -a "$dest/$sub/." "$tmp/"
        rm -rf "$dest"
        mv "$tmp" "$dest"
      fi
      ;;
    oci)
      image=$2; dest=$3; shift 3
      echo "skills: image $image -> $dest"
      mkdir -p "$dest"
      if [ -n "${SKILLS_INSECURE:-}" ]; then
        krane export --insecure "$image" /tmp/skill.tar
      else
        krane export "$image" /tmp/skill.tar
      fi
      tar xf /tmp/skill.tar -C "$dest"
      rm -f /tmp/skill.tar
      ;;
    *) echo "skills: unknown source $1" >&2; exit 2 ;;
  esac
done
"#;

/// What skills add to the agent's pod.
#[derive(Clone, Debug, PartialEq)]
pub struct SkillsPod {
    /// The init container fetching the skills.
    pub init_container: Container,
    /// The skills volume, and the git credentials volume when set.
    pub volumes: Vec<Volume>,
    /// The read-only mount of the skills in the agent container.
    pub mount: VolumeMount,
    /// `KAGENT_SKILLS_FOLDER` for the agent container.
    pub env: EnvVar,
}

/// Directory name of a git skill: `name`, or the last segment of the repository path
/// without `.git`.
pub fn git_skill_name(skill: &GitSkill) -> String {
    if let Some(name) = skill.name.as_deref().filter(|n| !n.is_empty()) {
        return name.to_owned();
    }
    let path = reqwest::Url::parse(&skill.url)
        .ok()
        .map(|url| url.path().to_owned())
        .filter(|path| !path.is_empty() && path != "/")
        .unwrap_or_else(|| skill.url.clone());
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    path.rsplit(['/', ':']).next().unwrap_or(path).to_owned()
}

/// Directory name of an image skill: the last repository segment without tag or digest.
pub fn image_skill_name(image: &str) -> String {
    let image = image.split_once('@').map_or(image, |(repo, _)| repo);
    let last = image.rsplit('/').next().unwrap_or(image);
    last.split_once(':')
        .map_or(last, |(repo, _)| repo)
        .to_owned()
}

/// Every skill directory name, git repositories first (kagent's order).
pub fn skill_names(skills: &Skills) -> Vec<String> {
    skills
        .git_refs
        .iter()
        .map(git_skill_name)
        .chain(skills.refs.iter().map(|image| image_skill_name(image)))
        .collect()
}

fn invalid(object: &str, field: String, message: String) -> Error {
    Error::InvalidSpec {
        object: object.to_owned(),
        field,
        message,
    }
}

/// Builds what `skills` adds to the pod; `security_context` is the agent container's own
/// (the init container runs under the same one). `object` names the Agent in errors.
pub fn skills_pod(
    object: &str,
    skills: &Skills,
    image: &str,
    security_context: Option<SecurityContext>,
) -> Result<Option<SkillsPod>> {
    if skills.refs.is_empty() && skills.git_refs.is_empty() {
        return Ok(None);
    }
    let mut args = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        SCRIPT.to_owned(),
        "skills-init".to_owned(),
    ];
    let mut seen = Vec::new();
    let mut claim = |field: String, name: String| -> Result<String> {
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(invalid(
                object,
                field,
                format!(
                    "Invalid value: {name:?}: a skill directory name must be a single path segment"
                ),
            ));
        }
        if seen.contains(&name) {
            return Err(invalid(
                object,
                field,
                format!("Duplicate value: {name:?}: another skill uses this directory name"),
            ));
        }
        seen.push(name.clone());
        Ok(format!("{SKILLS_DIR}/{name}"))
    };
    for (index, skill) in skills.git_refs.iter().enumerate() {
        let field = format!("spec.skills.gitRefs[{index}]");
        let sub = skill
            .path
            .as_deref()
            .unwrap_or_default()
            .trim_end_matches('/');
        if sub.starts_with('/') || sub.split('/').any(|segment| segment == "..") {
            return Err(invalid(
                object,
                format!("{field}.path"),
                format!("Invalid value: {sub:?}: must be a relative path without '..'"),
            ));
        }
        let dest = claim(format!("{field}.name"), git_skill_name(skill))?;
        let reference = skill
            .r#ref
            .as_deref()
            .filter(|r| !r.is_empty())
            .unwrap_or("main");
        args.extend(["git", &skill.url, reference, &dest, sub].map(str::to_owned));
    }
    for (index, image) in skills.refs.iter().enumerate() {
        let dest = claim(
            format!("spec.skills.refs[{index}]"),
            image_skill_name(image),
        )?;
        args.extend(["oci".to_owned(), image.clone(), dest]);
    }
    let mut volumes = vec![Volume {
        name: SKILLS_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }];
    let mut mounts = vec![VolumeMount {
        name: SKILLS_VOLUME.to_owned(),
        mount_path: SKILLS_DIR.to_owned(),
        ..VolumeMount::default()
    }];
    if let Some(secret) = &skills.git_auth_secret_ref {
        volumes.push(Volume {
            name: GIT_AUTH_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.name.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
        mounts.push(VolumeMount {
            name: GIT_AUTH_VOLUME.to_owned(),
            mount_path: GIT_AUTH_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
    }
    let env = skills.insecure_skip_verify.unwrap_or(false).then(|| {
        vec![EnvVar {
            name: "SKILLS_INSECURE".to_owned(),
            value: Some("1".to_owned()),
            ..EnvVar::default()
        }]
    });
    Ok(Some(SkillsPod {
        init_container: Container {
            name: "skills-init".to_owned(),
            image: Some(image.to_owned()),
            command: Some(args),
            env,
            volume_mounts: Some(mounts),
            security_context,
            ..Container::default()
        },
        volumes,
        mount: VolumeMount {
            name: SKILLS_VOLUME.to_owned(),
            mount_path: SKILLS_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
        env: EnvVar {
            name: "KAGENT_SKILLS_FOLDER".to_owned(),
            value: Some(SKILLS_DIR.to_owned()),
            ..EnvVar::default()
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(url: &str) -> GitSkill {
        GitSkill {
            url: url.to_owned(),
            ..GitSkill::default()
        }
    }

    #[test]
    fn names_skills_as_kagent_does() {
        assert_eq!(
            git_skill_name(&git("https://github.com/org/my-skills")),
            "my-skills"
        );
        assert_eq!(
            git_skill_name(&git("https://github.com/org/x.git?y=1#z")),
            "x"
        );
        assert_eq!(git_skill_name(&git("git@github.com:org/repo.git")), "repo");
        assert_eq!(image_skill_name("ghcr.io/org/oci-skill:v1.0"), "oci-skill");
        assert_eq!(image_skill_name("localhost:5000/skill@sha256:ab"), "skill");
        assert_eq!(image_skill_name("foo:latest"), "foo");
    }

    #[test]
    fn values_reach_the_script_as_arguments_only() {
        let skills = Skills {
            git_refs: vec![GitSkill {
                url: "https://h/o/r;rm -rf /".into(),
                r#ref: Some("$(id)".into()),
                name: Some("evil".into()),
                ..GitSkill::default()
            }],
            ..Skills::default()
        };
        let pod = skills_pod("Agent t/a", &skills, "img", None)
            .unwrap()
            .unwrap();
        let command = pod.init_container.command.unwrap();
        assert_eq!(command[2], SCRIPT);
        assert_eq!(
            &command[4..],
            ["git", "https://h/o/r;rm -rf /", "$(id)", "/skills/evil", ""]
        );
    }

    #[test]
    fn refuses_escaping_paths_and_duplicate_names() {
        let bad_path = Skills {
            git_refs: vec![GitSkill {
                path: Some("../etc".into()),
                ..git("https://h/o/r")
            }],
            ..Skills::default()
        };
        let error = skills_pod("Agent t/a", &bad_path, "img", None).unwrap_err();
        assert!(
            error.to_string().contains("spec.skills.gitRefs[0].path"),
            "{error}"
        );
        let duplicate = Skills {
            refs: vec!["a/x:1".into(), "b/x:2".into()],
            ..Skills::default()
        };
        let error = skills_pod("Agent t/a", &duplicate, "img", None).unwrap_err();
        assert!(error.to_string().contains("spec.skills.refs[1]"), "{error}");
    }
}
